"""Our server against LibreTranslate itself, on the same weights: every
check runs against both, in the same run, so that each is shown to be
LibreTranslate's behaviour and not our reading of it.

The weights: a small run (tests/helpers/small_run.py, with a position
table long enough for the 256 tokens Argos lets CTranslate2 decode),
exported to CTranslate2 and built into an Argos package
(tests/helpers/libretranslate.py) for LibreTranslate 1.9.6; ours serves the
run folder itself (the keras runtime), from `serve`'s own options. Each
server runs in three configurations, each with the same flags by
LibreTranslate's names: its defaults; its limits, suggestions, /metrics and
optional keys on; and keys required, a request limit, files translation
off.

The checks (`CHECKS`): LibreTranslate's own test cases (its
tests/test_api, replayed over HTTP), the contract its code defines
(libretranslate/app.py: where fields come from, alternatives, untranslatable
text, CORS, files, suggestions, limits, keys), and the exact requests of
its clients. Then the client packages themselves run against both:
libretranslate-aio (sync and async), deep-translator, libretranslatepy,
transpolibre on a .po file, and the npm `libretranslate` through node.
What is ours alone (bad input, the log) is at the end. Where LibreTranslate
is not installed its half is skipped (tools/run_tests.sh installs it).
Traffic goes to 127.0.0.1 only.
"""

import asyncio
import contextlib
import dataclasses
import http.client
import json
import os
import shutil
import subprocess
import sys
import urllib.parse

import httpx
import pytest

from helpers import libretranslate as peer
from helpers import processes, servers
from helpers.shared import built_once
from helpers.small_run import CONFIG, write_small_run

pytestmark = pytest.mark.slow

KEYS = {"open": (1000, None), "limited": (1000, 10), "burst": (3, None)}
"""API keys of the configurations with keys: `{key: (requests a minute,
characters a text)}`, the same in LibreTranslate's database and our file."""

# Each configuration: (our flags, LibreTranslate's); "{keys}" and "{work}"
# are filled in. LibreTranslate's --api-keys alone makes keys optional; its
# --require-api-key-origin, with an origin no request names, required.
CONFIGURATIONS = {
    "defaults": ([], []),
    "limits": (["--char-limit", "100", "--batch-limit", "2", "--alternatives-limit", "2",
                "--suggestions", "--suggestions-db", "{work}/suggestions.db", "--metrics",
                "--api-keys", "{keys}", "--api-keys-optional"],
               ["--char-limit", "100", "--batch-limit", "2", "--alternatives-limit", "2",
                "--suggestions", "--metrics", "--api-keys"]),
    "keys": (["--api-keys", "{keys}", "--req-limit", "100", "--disable-files-translation"],
             ["--api-keys", "--require-api-key-origin", "https://page.example", "--req-limit",
              "100", "--disable-files-translation"]),
}
IMPLEMENTATIONS = ("libretranslate", "ours")
GERMAN = "Das Haus ist groß und der Baum ist klein."


@dataclasses.dataclass
class Check:
    """A request (`httpx.Client.request` arguments) to a server in
    `configuration`, and `expect(response, server)` asserting on its answer."""

    configuration: str
    name: str
    method: str
    path: str
    expect: object
    send: dict

    @property
    def id(self):
        return f"{self.configuration}-{self.name}"


CHECKS = []


def check(configuration, name, method, path, **send):
    def register(expect):
        CHECKS.append(Check(configuration, name, method, path, expect, send))
        return expect

    return register


def _error(response, status, message=None):
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert isinstance(error, str) and "\n" not in error
    if message is not None:
        assert error == message


GOOD = {"q": GERMAN, "source": "de", "target": "en"}

# ------------------------------------------------ LibreTranslate's own tests

@check("defaults", "detect_language", "POST", "/detect", data={"q": "Hallo"})
def _(response, server):
    found = response.json()
    assert response.status_code == 200 and len(found) >= 1
    assert "confidence" in found[0] and "language" in found[0]


@check("defaults", "detect_without_parameters", "POST", "/detect")
def _(response, server):
    _error(response, 400)


@check("defaults", "detect_by_get", "GET", "/detect")
def _(response, server):
    assert response.status_code == 405


@check("defaults", "frontend_settings", "GET", "/frontend/settings")
def _(response, server):
    assert response.status_code == 200


@check("defaults", "languages", "GET", "/languages")
def _(response, server):
    found = response.json()
    assert response.status_code == 200 and len(found) >= 1
    assert "code" in found[0] and "name" in found[0]


@check("defaults", "languages_by_post", "POST", "/languages")
def _(response, server):
    assert response.status_code == 405


@check("defaults", "health", "GET", "/health")
def _(response, server):
    assert response.status_code == 200 and response.json() == {"status": "ok"}


@check("defaults", "health_by_post", "POST", "/health")
def _(response, server):
    assert response.status_code == 405


@check("defaults", "spec", "GET", "/spec")
def _(response, server):
    assert response.status_code == 200 and "/translate" in response.json()["paths"]


@check("defaults", "spec_by_post", "POST", "/spec")
def _(response, server):
    assert response.status_code == 405


@check("defaults", "translate", "POST", "/translate", data=GOOD | {"format": "text"})
def _(response, server):
    assert response.status_code == 200 and isinstance(response.json()["translatedText"], str)


@check("defaults", "translate_batch", "POST", "/translate",
       json=GOOD | {"q": ["Das Haus", "Der Baum"], "format": "text"})
def _(response, server):
    translated = response.json()["translatedText"]
    assert response.status_code == 200 and isinstance(translated, list) and len(translated) == 2


@check("defaults", "translate_unsupported_language", "POST", "/translate",
       data=GOOD | {"target": "zz", "format": "text"})
def _(response, server):
    _error(response, 400, "zz is not supported")


@check("defaults", "translate_missing_parameter", "POST", "/translate",
       data={"source": "de", "target": "en", "format": "text"})
def _(response, server):
    _error(response, 400, "Invalid request: missing q parameter")


# ------------------------------------------------ the contract of its code

@check("defaults", "missing_source", "POST", "/translate", data={"q": "Haus", "target": "en"})
def _(response, server):
    _error(response, 400, "Invalid request: missing source parameter")


@check("defaults", "missing_target", "POST", "/translate", json={"q": "Haus", "source": "de"})
def _(response, server):
    _error(response, 400, "Invalid request: missing target parameter")


@check("defaults", "empty_q", "POST", "/translate", json=GOOD | {"q": ""})
def _(response, server):
    _error(response, 400, "Invalid request: missing q parameter")


@check("defaults", "empty_list_q", "POST", "/translate", json=GOOD | {"q": []})
def _(response, server):
    _error(response, 400, "Invalid request: missing q parameter")


@check("defaults", "unknown_source", "POST", "/translate", json=GOOD | {"source": "zz"})
def _(response, server):
    _error(response, 400, "zz is not supported")


@check("defaults", "unknown_format", "POST", "/translate", json=GOOD | {"format": "xml"})
def _(response, server):
    _error(response, 400, "xml format is not supported")


@check("defaults", "fields_in_the_query_string", "POST", "/translate",
       params=GOOD | {"format": "text", "api_key": "unused"})
def _(response, server):
    # deep-translator's LibreTranslator: every field in the query string,
    # an empty body.
    assert response.status_code == 200 and isinstance(response.json()["translatedText"], str)


@check("defaults", "the_query_before_the_form", "POST", "/translate",
       params={"q": "Haus", "source": "en", "target": "en"},
       data={"q": "Baum", "source": "de", "target": "en"})
def _(response, server):
    assert response.json() == {"translatedText": "Haus"}  # the query's, and en to en as it is


@check("defaults", "json_alone_when_the_body_is_json", "POST", "/translate",
       params={"target": "en"}, json={"q": "Haus", "source": "de"})
def _(response, server):
    _error(response, 400, "Invalid request: missing target parameter")


@check("defaults", "the_same_language_as_it_is", "POST", "/translate",
       json={"q": "Guten Tag", "source": "en", "target": "en"})
def _(response, server):
    assert response.json() == {"translatedText": "Guten Tag"}


@check("defaults", "emoji_as_they_are", "POST", "/translate", json=GOOD | {"q": "😀 🎉"})
def _(response, server):
    assert response.status_code == 200 and response.json() == {"translatedText": "😀 🎉"}


@check("defaults", "emoji_detected_as_nothing", "POST", "/translate",
       json={"q": "😀", "source": "auto", "target": "en"})
def _(response, server):
    assert response.json() == {"translatedText": "😀",
                               "detectedLanguage": {"confidence": 0.0, "language": "en"}}


@check("defaults", "alternatives_negative_counted_as_none", "POST", "/translate",
       json=GOOD | {"alternatives": -3})
def _(response, server):
    assert response.status_code == 200 and "alternatives" not in response.json()


@check("defaults", "alternatives_for_html_none", "POST", "/translate",
       json=GOOD | {"q": "<p>Das <b>Haus</b></p>", "format": "html", "alternatives": 3})
def _(response, server):
    answer = response.json()
    assert response.status_code == 200 and answer["alternatives"] == []
    assert answer["translatedText"].startswith("<p>") and "</b>" in answer["translatedText"]


@check("defaults", "alternatives_for_text", "POST", "/translate",
       json=GOOD | {"alternatives": 2})
def _(response, server):
    answer = response.json()
    others = answer["alternatives"]
    assert response.status_code == 200 and isinstance(others, list) and len(others) <= 2
    assert all(isinstance(other, str) and other != answer["translatedText"] for other in others)


@check("defaults", "alternatives_not_a_number", "POST", "/translate",
       data=GOOD | {"alternatives": "many"})
def _(response, server):
    _error(response, 400, "Invalid request: alternatives parameter is not a number")


@check("defaults", "source_auto", "POST", "/translate", json=GOOD | {"source": "auto"})
def _(response, server):
    detected = response.json()["detectedLanguage"]
    assert detected["language"] == "de" and 0 < detected["confidence"] <= 100


@check("defaults", "source_auto_for_a_list", "POST", "/translate",
       json=GOOD | {"q": [GERMAN, "Der Baum ist hier."], "source": "auto"})
def _(response, server):
    detected = response.json()["detectedLanguage"]
    assert [entry["language"] for entry in detected] == ["de", "de"]


@check("defaults", "no_detection_for_a_given_source", "POST", "/translate", json=GOOD)
def _(response, server):
    assert set(response.json()) == {"translatedText"}


@check("defaults", "detect_a_list", "POST", "/detect", json={"q": [GERMAN, "Der Baum."]})
def _(response, server):
    found = response.json()
    assert response.status_code == 200 and found[0]["language"] == "de"


@check("defaults", "the_page_s_multipart", "POST", "/translate",
       files={"q": (None, GERMAN), "source": (None, "auto"), "target": (None, "en"),
              "format": (None, "text"), "alternatives": (None, "3"), "api_key": (None, "")})
def _(response, server):
    # LibreTranslate's own page (static/js/app.js): multipart, alternatives 3.
    answer = response.json()
    assert response.status_code == 200 and isinstance(answer["alternatives"], list)
    assert answer["detectedLanguage"]["language"] == "de"


@check("defaults", "npm_client_s_json", "POST", "/translate",
       json=GOOD | {"format": "text", "apiKey": ""})
def _(response, server):
    assert response.status_code == 200 and isinstance(response.json()["translatedText"], str)


@check("defaults", "translate_by_get", "GET", "/translate")
def _(response, server):
    assert response.status_code == 405


@check("defaults", "cors_on_an_answer", "GET", "/languages")
def _(response, server):
    assert response.headers["access-control-allow-origin"] == "*"


@check("defaults", "cors_on_an_error", "POST", "/translate", json={"source": "de"})
def _(response, server):
    assert response.status_code == 400 and response.headers["access-control-allow-origin"] == "*"


@check("defaults", "cors_preflight", "OPTIONS", "/translate",
       headers={"Origin": "https://page.example", "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "Content-Type"})
def _(response, server):
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == "*"
    assert "POST" in response.headers["access-control-allow-methods"]
    assert "Content-Type" in response.headers["access-control-allow-headers"]


@check("defaults", "frontend_settings_fields", "GET", "/frontend/settings")
def _(response, server):
    settings = response.json()
    assert {"charLimit", "frontendTimeout", "apiKeys", "keyRequired", "suggestions",
            "filesTranslation", "supportedFilesFormat", "language"} <= set(settings)
    assert settings["charLimit"] == -1 and settings["apiKeys"] is False
    assert settings["keyRequired"] is False and settings["suggestions"] is False
    assert settings["filesTranslation"] is True
    assert {".txt", ".html", ".docx"} <= set(settings["supportedFilesFormat"])
    assert settings["language"]["source"] == {"code": "auto", "name": "Auto Detect"}
    assert settings["language"]["target"]["code"] in {"de", "en"}


@check("defaults", "suggestions_off", "POST", "/suggest",
       data={"q": "Haus", "s": "house", "source": "de", "target": "en"})
def _(response, server):
    _error(response, 403, "Suggestions are disabled on this server.")


def _downloaded(response, server, suffix):
    url = response.json()["translatedFileUrl"]
    assert response.status_code == 200 and url.startswith(server.url + "download_file/")
    assert url.endswith(suffix)
    download = httpx.get(url, timeout=60)
    assert download.status_code == 200 and download.content
    assert download.headers["content-disposition"].startswith("attachment")
    return download.content


@check("defaults", "translate_a_txt_file", "POST", "/translate_file",
       data={"source": "de", "target": "en"},
       files={"file": ("brief.txt", f"{GERMAN}\nDer Baum.\n".encode())})
def _(response, server):
    assert _downloaded(response, server, ".txt").decode().count("\n") == 2


@check("defaults", "translate_an_html_file", "POST", "/translate_file",
       data={"source": "de", "target": "en"},
       files={"file": ("seite.html", b"<html><body><p>Das <b>Haus</b>.</p></body></html>")})
def _(response, server):
    assert b"<b>" in _downloaded(response, server, ".html")


@check("defaults", "translate_file_unknown_format", "POST", "/translate_file",
       data={"source": "de", "target": "en"}, files={"file": ("a.xyz", b"Das Haus")})
def _(response, server):
    _error(response, 400)
    assert "file format not supported" in response.json()["error"]


@check("defaults", "translate_file_without_a_file", "POST", "/translate_file",
       files={"source": (None, "de"), "target": (None, "en")})
def _(response, server):
    _error(response, 400)


# ------------------------------------------------ limits, suggestions, metrics, keys

@check("limits", "frontend_settings_limits", "GET", "/frontend/settings")
def _(response, server):
    settings = response.json()
    assert settings["charLimit"] == 100 and settings["suggestions"] is True
    assert settings["apiKeys"] is True and settings["keyRequired"] is False


@check("limits", "over_the_char_limit", "POST", "/translate", json=GOOD | {"q": "Haus " * 21})
def _(response, server):
    _error(response, 400, "Invalid request: request (105) exceeds text limit (100)")


@check("limits", "within_the_char_limit", "POST", "/translate", json=GOOD)
def _(response, server):
    assert response.status_code == 200


@check("limits", "over_the_batch_limit", "POST", "/translate",
       json=GOOD | {"q": ["Haus", "Baum", "klein"]})
def _(response, server):
    _error(response, 400, "Invalid request: request (3) exceeds text limit (2)")


@check("limits", "within_the_batch_limit", "POST", "/translate",
       json=GOOD | {"q": ["Haus", "Baum"]})
def _(response, server):
    assert response.status_code == 200 and len(response.json()["translatedText"]) == 2


@check("limits", "over_the_alternatives_limit", "POST", "/translate",
       json=GOOD | {"alternatives": 3})
def _(response, server):
    _error(response, 400, "Invalid request: alternatives parameter must be <= 2")


@check("limits", "a_suggestion_stored", "POST", "/suggest",
       data={"q": "Haus", "s": "house", "source": "de", "target": "en"})
def _(response, server):
    assert response.status_code == 200 and response.json() == {"success": True}


@check("limits", "a_suggestion_without_s", "POST", "/suggest",
       json={"q": "Haus", "source": "de", "target": "en"})
def _(response, server):
    _error(response, 400, "Invalid request: missing s parameter")


@check("limits", "metrics", "GET", "/metrics")
def _(response, server):
    assert response.status_code == 200 and response.headers["content-type"].startswith(
        "text/plain")


@check("limits", "a_wrong_key", "POST", "/translate", json=GOOD | {"api_key": "nope"})
def _(response, server):
    _error(response, 403, "Invalid API key")


@check("limits", "no_key_where_keys_are_optional", "POST", "/translate", json=GOOD)
def _(response, server):
    assert response.status_code == 200


@check("limits", "a_key_s_own_char_limit", "POST", "/translate",
       json=GOOD | {"q": "Das Haus ist hier", "api_key": "limited"})
def _(response, server):
    _error(response, 400, "Invalid request: request (17) exceeds text limit (10)")


@check("keys", "frontend_settings_keys", "GET", "/frontend/settings")
def _(response, server):
    settings = response.json()
    assert settings["apiKeys"] is True and settings["keyRequired"] is True
    assert settings["filesTranslation"] is False and settings["supportedFilesFormat"] == []


@check("keys", "a_missing_key", "POST", "/translate", json=GOOD)
def _(response, server):
    _error(response, 400, "Please contact the server operator to get an API key")


@check("keys", "detect_without_a_key", "POST", "/detect", data={"q": GERMAN})
def _(response, server):
    _error(response, 400, "Please contact the server operator to get an API key")


@check("keys", "a_key", "POST", "/translate", data=GOOD | {"api_key": "open"})
def _(response, server):
    assert response.status_code == 200


@check("keys", "languages_without_a_key", "GET", "/languages")
def _(response, server):
    assert response.status_code == 200


@check("keys", "files_translation_off", "POST", "/translate_file",
       data={"source": "de", "target": "en", "api_key": "open"},
       files={"file": ("brief.txt", GERMAN.encode())})
def _(response, server):
    _error(response, 403, "Files translation are disabled on this server.")


# ------------------------------------------------ the servers

@pytest.fixture(autouse=True)
def _seed():
    """Not reseeded between tests (see tests/serving/test_serve.py)."""


@dataclasses.dataclass
class Server:
    url: str
    stop: object


@pytest.fixture(scope="module")
def peer_run(tmp_path_factory):
    """The small run with 300 positions, its CTranslate2 export, and the
    Argos package built from it."""
    def build(folder):
        run = folder / "run"
        run.mkdir()
        write_small_run(run, config=CONFIG.replace(max_length=300))
        (run / "run.json").write_text(json.dumps({"options": {
            "dataset": "local", "source_language": "de", "target_language": "en"}}))
        from keras_transformer.export import export_run

        export_run(str(run), str(folder / "export"), formats=["ctranslate2"])
        (folder / "packages").mkdir()
        peer.argos_packages(folder / "export" / "ctranslate2", run / "tokenizer.model", "de",
                            "en", folder / "packages")

    return built_once(tmp_path_factory, "libretranslate_peer", build)


@pytest.fixture(scope="module")
def runtime(peer_run):
    from keras_transformer import runtimes

    return runtimes.open_runtime(str(peer_run / "run"), in_flight=1)


def _start_ours(run, runtime, flags, work):
    """`serve RUN FLAGS`, built by the command's own options and
    configuration, on uvicorn in a thread of this process (the runtime
    shared by the configurations)."""
    from keras_transformer.commands import serve
    from keras_transformer.serving import ServedModel

    port, = processes.free_ports(1)
    args = serve.parser().parse_args([str(run), "--port", str(port), "--languages", "de-en",
                                      "--files-dir", str(work / "files"), *flags])
    os.makedirs(work / "files", exist_ok=True)
    return Server(*servers.in_thread(serve.server_config(args, [ServedModel(runtime, "de",
                                                                             "en")])))


def _start_libretranslate(packages, flags, work):
    peer.write_keys(work, KEYS)
    process, url = peer.start(packages, work, ["de", "en"], *flags)

    def stop():
        process.terminate()
        process.wait(timeout=30)

    return Server(url, stop)


@pytest.fixture(scope="module")
def fleet(peer_run, runtime, tmp_path_factory):
    """`fleet(implementation, configuration)`: that server, started on first
    use and stopped at the module's end."""
    started = {}
    keys = tmp_path_factory.mktemp("keys") / "keys.txt"
    keys.write_text("".join(f"{key} {limit}{f' {chars}' if chars else ''}\n"
                            for key, (limit, chars) in KEYS.items()).replace(" 1000\n", "\n"))

    def get(implementation, configuration):
        if implementation == "libretranslate" and peer.executable() is None:
            pytest.skip("LibreTranslate is not installed (tools/run_tests.sh installs it into "
                        ".venv-libretranslate: pip install libretranslate==1.9.6)")
        if (implementation, configuration) not in started:
            work = tmp_path_factory.mktemp(f"{implementation}-{configuration}")
            ours, theirs = CONFIGURATIONS[configuration]
            flags = [flag.format(keys=keys, work=work)
                     for flag in (ours if implementation == "ours" else theirs)]
            started[implementation, configuration] = (
                _start_ours(peer_run / "run", runtime, flags, work) if implementation == "ours"
                else _start_libretranslate(peer_run / "packages", flags, work))
        return started[implementation, configuration]

    yield get
    for server in started.values():
        server.stop()


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("check", CHECKS, ids=[check.id for check in CHECKS])
def test_a_check_libretranslate_passes(fleet, check, implementation):
    server = fleet(implementation, check.configuration)
    response = httpx.request(check.method, server.url + check.path.lstrip("/"), timeout=120,
                             **check.send)
    check.expect(response, server)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_a_key_s_own_request_limit(fleet, implementation):
    """`burst` may send 3 requests a minute: the fourth is refused with 429
    and LibreTranslate's Slowdown line."""
    server = fleet(implementation, "limits")
    answers = [httpx.post(server.url + "translate", json=GOOD | {"api_key": "burst"},
                          timeout=120) for _ in range(4)]
    assert [answer.status_code for answer in answers] == [200, 200, 200, 429]
    assert answers[-1].json()["error"].startswith("Slowdown: 3 per 1 minute")


def _metric_samples(server):
    """`{(sample name, sorted labels): value}` of LibreTranslate's own
    metrics on the server's /metrics (`_created` left out: LibreTranslate's
    multiprocess collector gives none)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(server.url + "metrics", timeout=60).text
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text)
            if family.name.startswith("libretranslate_") for sample in family.samples
            if not sample.name.endswith("_created")}


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_libretranslate_s_own_metrics(fleet, implementation):
    """With --metrics, LibreTranslate's metric names and labels, which its
    dashboards read, the same on both servers: the series it makes at its
    start; each answer of /translate and /detect counted by endpoint,
    status, address (X-Forwarded-For's first) and key ("" for none and for
    a refused one); nothing in flight once answered; other paths not
    measured."""
    server = fleet(implementation, "limits")
    duration = "libretranslate_http_request_duration_seconds"

    def labels(endpoint, status, address, key):
        return (("api_key", key), ("endpoint", endpoint), ("request_ip", address),
                ("status", str(status)))

    before = _metric_samples(server)
    assert (duration + "_count", labels("/translate", 200, "127.0.0.1", "")) in before
    sent = [("translate", GOOD | {"api_key": "open"}, {}, 200),
            ("translate", GOOD | {"api_key": "nope"}, {}, 403),
            ("detect", {"q": GERMAN}, {"X-Forwarded-For": "203.0.113.7, 10.0.0.1"}, 200),
            ("languages", None, {}, 200)]
    for path, body, headers, status in sent:
        answer = (httpx.post(server.url + path, json=body, headers=headers, timeout=120)
                  if body is not None else httpx.get(server.url + path, timeout=60))
        assert answer.status_code == status, answer.text
    after = _metric_samples(server)
    grown = {key: value - before.get(key, 0) for key, value in after.items()
             if key[0] == duration + "_count" and value != before.get(key, 0)}
    assert grown == {(duration + "_count", labels("/translate", 200, "127.0.0.1", "open")): 1,
                     (duration + "_count", labels("/translate", 403, "127.0.0.1", "")): 1,
                     (duration + "_count", labels("/detect", 200, "203.0.113.7", "")): 1}
    in_flight = {labels_: value for (name, labels_), value in after.items()
                 if name == "libretranslate_http_requests_in_flight"}
    assert in_flight and set(in_flight.values()) == {0}
    assert (("api_key", "open"), ("endpoint", "/translate"), ("request_ip", "127.0.0.1")) \
        in in_flight


# ------------------------------------------------ the clients themselves

@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_libretranslate_aio_sync_and_async(fleet, implementation, tmp_path):
    from libretranslate_aio import AsyncLibreTranslate, ForbiddenError, LibreTranslate

    server = fleet(implementation, "defaults")
    text_file = tmp_path / "brief.txt"
    text_file.write_text(GERMAN + "\n")
    with LibreTranslate(server.url) as client:
        assert client.health()
        assert isinstance(client.translate(GERMAN, "de", "en").translated_text, str)
        auto = client.translate(GERMAN, "auto", "en", alternatives=2)
        assert auto.detected_language.language == "de" and isinstance(auto.alternatives, list)
        assert client.detect(GERMAN)[0].language == "de"
        assert {language.code for language in client.languages()} == {"de", "en"}
        settings = client.frontend_settings()
        assert settings.char_limit == -1 and ".txt" in settings.supported_files_format
        url = client.translate_file(text_file, "de", "en").translated_file_url
        assert url.startswith(server.url + "download_file/")
        with pytest.raises(ForbiddenError, match="Suggestions are disabled"):
            client.suggest("Haus", "house", "de", "en")

    async def in_async():
        async with AsyncLibreTranslate(server.url) as client:
            translated, detected, languages = await asyncio.gather(
                client.translate(GERMAN, "de", "en"), client.detect(GERMAN), client.languages())
            return translated, detected, languages

    translated, detected, languages = asyncio.run(in_async())
    assert isinstance(translated.translated_text, str) and detected[0].language == "de"
    assert {language.code for language in languages} == {"de", "en"}


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_deep_translator(fleet, implementation):
    from deep_translator import LibreTranslator

    server = fleet(implementation, "defaults")
    translator = LibreTranslator(source="de", target="en", api_key="any", custom_url=server.url)
    translated = translator.translate(GERMAN)
    assert isinstance(translated, str) and translated
    assert all(isinstance(text, str) for text in translator.translate_batch(["Haus", "Baum"]))


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_libretranslatepy(fleet, implementation):
    from libretranslatepy import LibreTranslateAPI

    server = fleet(implementation, "defaults")
    client = LibreTranslateAPI(server.url)
    assert isinstance(client.translate(GERMAN, "de", "en"), str)
    assert client.detect(GERMAN)[0]["language"] == "de"
    assert {language["code"] for language in client.languages()} == {"de", "en"}


PO_FILE = """msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\\n"

msgid "Das Haus ist groß."
msgstr ""

msgid "Der Baum ist klein."
msgstr ""

msgid "Schreib an <hilfe@example.org>"
msgstr ""
"""


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_transpolibre_translates_a_po_file(fleet, implementation, tmp_path):
    import polib

    server = fleet(implementation, "defaults")
    po = tmp_path / "de.po"
    po.write_text(PO_FILE, encoding="utf-8")
    command = shutil.which("transpolibre", path=os.path.dirname(sys.executable))
    result = subprocess.run([command, "-s", "de", "-t", "en", "-u", server.url.rstrip("/"),
                             "-f", str(po)], capture_output=True, text=True, timeout=300,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    # Each entry holds what the server answers for it (the e-mail address
    # kept, as transpolibre keeps it).
    entries = {entry.msgid: entry.msgstr for entry in polib.pofile(str(po))}
    for text in ("Das Haus ist groß.", "Der Baum ist klein."):
        answer = httpx.post(server.url + "translate", data={"q": text, "source": "de",
                                                            "target": "en"}, timeout=60)
        assert entries[text] == answer.json()["translatedText"]
    assert entries["Schreib an <hilfe@example.org>"] == "Schreib an <hilfe@example.org>"


NODE_CLIENT = os.path.join(processes.ROOT, ".node", "node_modules", "libretranslate")


@pytest.mark.skipif(shutil.which("node") is None or not os.path.isdir(NODE_CLIENT),
                    reason="node or the npm package libretranslate is not installed "
                           "(tools/run_tests.sh installs it into .node where npm is)")
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_the_npm_client_through_node(fleet, implementation):
    server = fleet(implementation, "defaults")
    script = (f"require({json.dumps(NODE_CLIENT)}).translate({{query: {json.dumps(GERMAN)}, "
              f"source: 'de', target: 'en', apiurl: {json.dumps(server.url.rstrip('/'))}}})"
              ".then(text => console.log(JSON.stringify(text)))"
              ".catch(error => { console.error(String(error)); process.exit(1); });")
    result = subprocess.run(["node", "-e", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    translated = json.loads(result.stdout)
    assert isinstance(translated, str) and translated


# ------------------------------------------------ ours alone: bad input and the log

@pytest.fixture(scope="module")
def logged_server(peer_run, tmp_path_factory):
    """`serve` as a user runs it (its own process), with limits and
    suggestions on and origins restricted, its output in a log file."""
    work = tmp_path_factory.mktemp("logged")
    keys = work / "keys.txt"
    keys.write_text("open\ncrowd\n")
    log = open(work / "serve.log", "w")
    process, url = servers.start(
        peer_run / "run", "--req-limit", "20", "--suggestions", "--suggestions-db",
        work / "suggestions.db", "--max-suggestions", "50", "--cors-origins",
        "https://page.example", "--api-keys", keys, "--api-keys-optional", log=log)
    yield url, work
    process.terminate()
    assert process.wait(timeout=60) == 0
    log.close()


def _raw(url, method, target):
    """`method target` sent as it is (httpx refuses URLs over 64 KiB):
    an `httpx.Response` of the answer."""
    address = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=60)
    try:
        connection.request(method, target)
        answer = connection.getresponse()
        return httpx.Response(answer.status, headers=answer.getheaders(), content=answer.read())
    finally:
        connection.close()


def test_bad_input_gets_a_4xx_and_one_line_never_a_traceback(logged_server):
    url, work = logged_server
    long_query = urllib.parse.urlencode({"q": "Haus " * 20000, "source": "de", "target": "en"})
    answers = {
        f"a 100,000-character query string to {path}": _raw(url, method, f"{path}?{long_query}")
        for method, path in (("POST", "/translate"), ("POST", "/suggest"),
                             ("POST", "/translate_file"), ("GET", "/frontend/settings"))}
    answers |= {
        "a preflight from an origin not allowed": httpx.options(
            url + "translate", headers={"Origin": "https://elsewhere.example",
                                        "Access-Control-Request-Method": "POST"}),
        "a file of an unknown kind": httpx.post(url + "translate_file", data={
            "source": "de", "target": "en"}, files={"file": ("x.exe", b"MZ")}),
        "a malformed multipart body": httpx.post(url + "suggest", content=b"--x\r\nbroken",
                                                 headers={"Content-Type":
                                                          "multipart/form-data; boundary=x"}),
    }
    for what, response in answers.items():
        assert 400 <= response.status_code < 500, (what, response.text)
        assert "\n" not in response.json()["error"], what
    assert answers["a 100,000-character query string to /translate"].status_code == 414
    # Duplicate fields in query and body: merged as LibreTranslate merges
    # them (the query's first), never an error.
    merged = httpx.post(url + "translate", params={"q": "Haus", "source": "en", "target": "en"},
                        data={"q": "Baum", "source": "de", "target": "fr"})
    assert merged.status_code == 200 and merged.json() == {"translatedText": "Haus"}
    # An allowed origin is echoed back; another gets no CORS header.
    allowed = httpx.get(url + "languages", headers={"Origin": "https://page.example"})
    assert allowed.headers["access-control-allow-origin"] == "https://page.example"
    other = httpx.get(url + "languages", headers={"Origin": "https://elsewhere.example"})
    assert "access-control-allow-origin" not in other.headers


def test_a_suggestion_flood_is_bounded_on_disk_and_the_limit_holds_for_50_clients(
        logged_server):
    import concurrent.futures
    import sqlite3

    url, work = logged_server
    # A key of its own for the flood (no limit of its own but the server's 20
    # a minute): 60 suggestions from one key, 20 pass the limit, then 429s.
    flood = [httpx.post(url + "suggest", data={"q": f"Haus {index}", "s": "house",
                                               "source": "de", "target": "en",
                                               "api_key": "open"}, timeout=60)
             for index in range(60)]
    statuses = [answer.status_code for answer in flood]
    assert statuses.count(200) == 20 and set(statuses[20:]) == {429}, statuses
    with contextlib.closing(sqlite3.connect(work / "suggestions.db")) as database:
        stored, = database.execute("SELECT count(*) FROM suggestions").fetchone()
    assert stored == 20
    # 50 concurrent clients of one key, one request each: 20 answered, the
    # others 429 in one line each, never a 500.
    with concurrent.futures.ThreadPoolExecutor(50) as threads:
        answers = list(threads.map(lambda index: httpx.post(
            url + "detect", data={"q": f"Das Haus {index}", "api_key": "crowd"}, timeout=120),
            range(50)))
    statuses = sorted(answer.status_code for answer in answers)
    assert set(statuses) == {200, 429} and statuses.count(200) == 20, statuses
    for answer in answers:
        if answer.status_code == 429:
            assert answer.json()["error"] == "Slowdown: 20 per 1 minute"
    log = (work / "serve.log").read_text()
    assert "Traceback" not in log and " 500 " not in log
