"""Our DeepL API beside DeepL's own mock server (tests/helpers/deepl_mock.py:
where `DEEPL_MOCK` names a checkout of it): the same calls of the official
Python client and the same raw requests (Weblate's, LibreOffice's, and
mistakes) sent to both, and what each answers reduced to what a client
relies on (statuses, fields and their types, the exception raised). Each
check is then shown to be DeepL's behaviour, not our reading of it. Texts
differ (the mock makes up its translations); languages are German,
English and French, which both serve. Traffic goes to 127.0.0.1 only."""

import time

import deepl
import httpx
import pytest

from helpers import deepl_mock, servers
from helpers.small_run import pair_runs
from keras_transformer import runtimes
from keras_transformer.serving import ServedModel, Settings, create_app

pytestmark = pytest.mark.skipif(not deepl_mock.available(),
                                reason="DEEPL_MOCK does not name a deepl-mock checkout with its "
                                       "npm packages (see tests/helpers/deepl_mock.py)")

KEY = "differential-key"
OTHER_KEY = "another-differential-key"
CHECKS = []


@pytest.fixture(autouse=True)
def _seed():
    """Not reseeded between tests (see tests/serving/test_serve.py)."""


def check(function):
    CHECKS.append(function)
    return function


@pytest.fixture(scope="module")
def urls(small_run, tmp_path_factory):
    """`{"deepl-mock": url, "ours": url}`, both up for the module."""
    work = tmp_path_factory.mktemp("against-deepl-mock")
    models = [ServedModel(runtimes.open_runtime(str(run), in_flight=1), *pair)
              for run, pair in zip(pair_runs(small_run, work), (("de", "en"), ("en", "fr")))]
    settings = Settings(models, api_keys={KEY, OTHER_KEY},
                        glossaries_dir=str(work / "glossaries"))
    with open(work / "mock.log", "w") as log, servers.serving(create_app(settings)) as ours:
        process, mock = deepl_mock.start(log)
        try:
            yield {"deepl-mock": mock, "ours": ours}
        finally:
            process.terminate()
            process.wait(timeout=30)


def _outcome(call):
    """What `call()` gives, or the type of the exception it raises."""
    try:
        return call()
    except deepl.DeepLException as error:
        return type(error).__name__


def _kind(value):
    return type(value).__name__


@check
def translate_one_text(url):
    result = deepl.Translator(KEY, server_url=url.rstrip("/")).translate_text(
        "Das Haus ist groß.", source_lang="DE", target_lang="EN-US")
    return _kind(result.text), result.detected_source_lang, _kind(result.billed_characters)


@check
def translate_a_list_detecting_the_source(url):
    results = deepl.Translator(KEY, server_url=url.rstrip("/")).translate_text(
        ["Das Haus ist groß.", "Der Baum ist klein."], target_lang="EN-GB")
    # (the mock says EN whatever it is sent: the form alone is compared)
    return [(_kind(result.text), len(result.detected_source_lang) == 2
             and result.detected_source_lang.isupper()) for result in results]


@check
def translate_html(url):
    result = deepl.Translator(KEY, server_url=url.rstrip("/")).translate_text(
        "<p>Das <b>Haus</b></p>", source_lang="DE", target_lang="EN-US", tag_handling="html")
    return _kind(result.text)


@check
def languages(url):
    translator = deepl.Translator(KEY, server_url=url.rstrip("/"))
    sources = {found.code for found in translator.get_source_languages()}
    targets = {found.code: found.supports_formality
               for found in translator.get_target_languages()}
    return ({"DE", "EN"} <= sources, {code: targets.get(code) is not None
                                     for code in ("EN-GB", "EN-US", "FR")},
            "EN" in targets)


@check
def languages_v3(url):
    """Weblate's newer backend's list: the fields of each of the languages
    both serve, and their types."""
    headers = {"Authorization": f"DeepL-Auth-Key {KEY}"}
    found = {}
    for resource in ("translate_text", "glossary"):
        listed = httpx.get(url + "v3/languages", headers=headers,
                           params={"resource": resource}).json()
        found[resource] = {entry["lang"]: (sorted(entry), entry["usable_as_source"],
                                           _kind(entry["features"]))
                           for entry in listed if entry["lang"] in ("de", "en", "en-GB")}
    found["no resource"] = httpx.get(url + "v3/languages", headers=headers).status_code
    return found


@check
def usage(url):
    usage = deepl.Translator(KEY, server_url=url.rstrip("/")).get_usage()
    return (_kind(usage.character.count), _kind(usage.character.limit), usage.character.valid,
            usage.any_limit_reached)


@check
def model_type_used(url):
    """`model_type_used` answered where `model_type` is sent, its value a
    string (the mock says quality_optimized for every model_type; DeepL
    names the model it used), and left out where it is not."""
    translator = deepl.Translator(KEY, server_url=url.rstrip("/"))
    return {str(sent): _kind(translator.translate_text(
        "Das Haus", source_lang="DE", target_lang="EN-US", model_type=sent).model_type_used)
        for sent in ("quality_optimized", "prefer_quality_optimized", "latency_optimized", None)}


@check
def glossary_v3_as_a_form(url):
    """A v3 glossary created, and a dictionary merged, by form bodies, as
    deepl-node sends them (`dictionaries[0].source_lang`, ...)."""
    dictionary = {"dictionaries[0].source_lang": "de", "dictionaries[0].target_lang": "en",
                  "dictionaries[0].entries": "Haus\tBaum", "dictionaries[0].entries_format": "tsv"}
    headers = {"Authorization": f"DeepL-Auth-Key {KEY}"}
    created = httpx.post(url + "v3/glossaries", headers=headers, data={"name": "form",
                                                                       **dictionary})
    made = created.json()
    merged = httpx.patch(url + f"v3/glossaries/{made['glossary_id']}", headers=headers,
                         data={**dictionary, "dictionaries[0].entries": "klein\tsmall"})
    httpx.delete(url + f"v3/glossaries/{made['glossary_id']}", headers=headers)
    return (created.status_code, sorted(made), made["dictionaries"], merged.status_code,
            merged.json()["dictionaries"])


@check
def glossary_v2_life(url):
    translator = deepl.Translator(KEY, server_url=url.rstrip("/"))
    made = translator.create_glossary("terms", "DE", "EN", {"Haus": "Baum", "klein": "small"})
    seen = (made.source_lang, made.target_lang, made.entry_count, made.ready,
            _kind(made.creation_time))
    used = _kind(translator.translate_text("Das Haus", source_lang="DE", target_lang="EN-US",
                                           glossary=made).text)
    listed = made.glossary_id in [found.glossary_id for found in translator.list_glossaries()]
    entries = translator.get_glossary_entries(made)
    translator.delete_glossary(made)
    gone = _outcome(lambda: translator.get_glossary(made.glossary_id))
    return seen, used, listed, entries, gone


@check
def glossary_v3_life(url):
    client = deepl.DeepLClient(KEY, server_url=url.rstrip("/"))
    Entries = deepl.api_data.MultilingualGlossaryDictionaryEntries
    made = client.create_multilingual_glossary("multi", [Entries("DE", "EN", {"Haus": "Baum"}),
                                                         Entries("EN", "FR", {"tree": "arbre"})])
    pairs = sorted((found.source_lang, found.target_lang, found.entry_count)
                   for found in made.dictionaries)
    used = _kind(client.translate_text("Das Haus", source_lang="DE", target_lang="EN-US",
                                       glossary=made).text)
    updated = client.update_multilingual_glossary_dictionary(
        made, Entries("DE", "EN", {"klein": "small"}))
    merged = sorted((found.source_lang, found.entry_count) for found in updated.dictionaries)
    replaced = client.replace_multilingual_glossary_dictionary(
        made, Entries("DE", "EN", {"Baum": "tree"})).entry_count
    entries = client.get_multilingual_glossary_entries(made, "DE", "EN").dictionaries[0].entries
    renamed = client.update_multilingual_glossary_name(made, "renamed").name
    client.delete_multilingual_glossary_dictionary(made, source_lang="EN", target_lang="FR")
    left = [found.source_lang for found in
            client.get_multilingual_glossary(made.glossary_id).dictionaries]
    client.delete_multilingual_glossary(made)
    gone = _outcome(lambda: client.get_multilingual_glossary(made.glossary_id))
    return pairs, used, merged, replaced, entries, renamed, left, gone


@check
def translate_document_html(url):
    translator = deepl.Translator(KEY, server_url=url.rstrip("/"))
    handed = translator.translate_document_upload(b"<p>Das Haus ist klein.</p>",
                                                  source_lang="DE", target_lang="EN-US",
                                                  filename="seite.html")
    status = translator.translate_document_get_status(handed)
    while status.status.value in ("queued", "translating"):
        time.sleep(0.1)
        status = translator.translate_document_get_status(handed)
    first = translator.translate_document_download(handed)
    body = first.content if hasattr(first, "content") else first
    again = _outcome(lambda: translator.translate_document_download(handed))
    return status.status.value, _kind(status.billed_characters), _kind(body), again


@check
def wrong_key(url):
    return _outcome(lambda: deepl.Translator("invalid", server_url=url.rstrip("/"))
                    .translate_text("Das Haus", source_lang="DE", target_lang="EN-US"))


@check
def unknown_glossary(url):
    translator = deepl.Translator(KEY, server_url=url.rstrip("/"))
    return (_outcome(lambda: translator.get_glossary("00000000-0000-0000-0000-000000000000")),
            _outcome(lambda: translator.translate_text(
                "Das Haus", source_lang="DE", target_lang="EN-US",
                glossary="00000000-0000-0000-0000-000000000000")))


@check
def another_keys_glossaries_and_document(url):
    """What another key's calls with a key's v2 and v3 glossaries and its
    document raise (its class and status), and what the first key keeps."""
    a = deepl.DeepLClient(KEY, server_url=url.rstrip("/"))
    b = deepl.DeepLClient(OTHER_KEY, server_url=url.rstrip("/"))
    Entries = deepl.api_data.MultilingualGlossaryDictionaryEntries
    v2 = a.create_glossary("a2", "DE", "EN", {"Haus": "Baum"})
    v3 = a.create_multilingual_glossary("a3", [Entries("DE", "EN", {"Haus": "Baum"})])
    handed = a.translate_document_upload(b"Das Haus", source_lang="DE", target_lang="EN-US",
                                         filename="a.txt")

    def refused(call):
        try:
            call()
        except deepl.DeepLException as error:
            return type(error).__name__, error.http_status_code
        return "answered"

    found = {name: refused(call) for name, call in {
        "v2 get": lambda: b.get_glossary(v2.glossary_id),
        "v2 entries": lambda: b.get_glossary_entries(v2.glossary_id),
        "v2 delete": lambda: b.delete_glossary(v2.glossary_id),
        "v3 get": lambda: b.get_multilingual_glossary(v3.glossary_id),
        "v3 rename": lambda: b.update_multilingual_glossary_name(v3.glossary_id, "b"),
        "v3 replace": lambda: b.replace_multilingual_glossary_dictionary(
            v3.glossary_id, Entries("DE", "EN", {"Baum": "Haus"})),
        "v3 delete": lambda: b.delete_multilingual_glossary(v3.glossary_id),
        "translate": lambda: b.translate_text("Das Haus", source_lang="DE",
                                              target_lang="EN-US", glossary=v2.glossary_id),
        "document status": lambda: b.translate_document_get_status(handed)}.items()}
    found["listed for the other"] = (
        [glossary.glossary_id for glossary in b.list_glossaries()],
        [glossary.glossary_id for glossary in b.list_multilingual_glossaries()])
    found["kept"] = (a.get_glossary_entries(v2), a.get_multilingual_glossary(v3.glossary_id).name,
                     a.translate_document_get_status(handed).status.value != "error")
    a.delete_glossary(v2)
    a.delete_multilingual_glossary(v3)
    return found


def _raw(url, method, path, **request):
    headers = {"Authorization": f"DeepL-Auth-Key {KEY}", **request.pop("headers", {})}
    answer = httpx.request(method, url + path, headers=headers, timeout=60, **request)
    message = None
    if answer.headers.get("content-type", "").startswith("application/json") and answer.content:
        message = _kind(answer.json().get("message")) if isinstance(answer.json(), dict) else None
    return answer.status_code, message


@check
def mistakes(url):
    """Each mistake's status (and a message where a body is JSON)."""
    made = httpx.post(url + "v2/glossaries", headers={"Authorization": f"DeepL-Auth-Key {KEY}"},
                      json={"name": "m", "source_lang": "de", "target_lang": "en",
                            "entries": "Haus\tBaum", "entries_format": "tsv"}).json()
    statuses = {
        "no text": _raw(url, "POST", "v2/translate", json={"target_lang": "EN-US"}),
        "unknown target": _raw(url, "POST", "v2/translate",
                               json={"text": ["x"], "target_lang": "XX"}),
        "glossary without source": _raw(url, "POST", "v2/translate", json={
            "text": ["x"], "target_lang": "EN-US", "glossary_id": made["glossary_id"]}),
        "entries without a tab": _raw(url, "POST", "v2/glossaries", json={
            "name": "b", "source_lang": "de", "target_lang": "en", "entries": "Haus Baum",
            "entries_format": "tsv"}),
        "entries as JSON": _raw(url, "GET", f"v2/glossaries/{made['glossary_id']}/entries",
                                headers={"Accept": "application/json"}),
        "unknown document": _raw(url, "POST", "v2/document/" + "0" * 32,
                                 json={"document_key": "0" * 64}),
        "a .xyz document": _raw(url, "POST", "v2/document", data={"target_lang": "EN-US"},
                                files={"file": ("a.xyz", b"data")}),
        "bad languages type": _raw(url, "GET", "v2/languages", params={"type": "both"}),
    }
    httpx.delete(url + f"v2/glossaries/{made['glossary_id']}",
                 headers={"Authorization": f"DeepL-Auth-Key {KEY}"})
    return {name: status for name, (status, _) in statuses.items()}


@check
def libreoffice(url):
    answer = httpx.post(url + "v2/translate?tag_handling=html", timeout=60,
                        content=f"auth_key={KEY}&target_lang=EN-GB&text=%3Cspan%3EHaus%3C%2Fspan%3E"
                        .encode(), headers={"Content-Type": "application/x-www-form-urlencoded"})
    return answer.status_code, _kind(answer.json()["translations"][0]["text"])


@check
def weblate(url):
    headers = {"Authorization": f"DeepL-Auth-Key {KEY}"}
    pairs = httpx.get(url + "v2/glossary-language-pairs", headers=headers).json()
    created = httpx.post(url + "v2/glossaries", headers=headers, json={
        "name": "weblate:1:DE:EN:00", "source_lang": "DE", "target_lang": "EN",
        "entries": "Haus\tBaum", "entries_format": "tsv"})
    listed = httpx.get(url + "v2/glossaries", headers=headers).json()["glossaries"]
    glossary_id = next(found["glossary_id"] for found in listed
                       if found["name"] == "weblate:1:DE:EN:00")
    answer = httpx.post(url + "v2/translate", headers=headers, timeout=60, json={
        "text": ['Das Haus <x id="3"></x>'], "source_lang": "DE", "target_lang": "EN",
        "formality": "default", "tag_handling": "xml", "ignore_tags": ["x"],
        "glossary_id": glossary_id})
    deleted = httpx.delete(url + f"v2/glossaries/{glossary_id}", headers=headers).status_code
    # (the mock makes its text up, placeholders lost: tests/serving/test_deepl.py checks
    # that ours come back)
    return ({"source_lang": "de", "target_lang": "en"} in pairs["supported_languages"],
            created.status_code, answer.status_code,
            _kind(answer.json()["translations"][0]["text"]), deleted)


@pytest.mark.parametrize("function", CHECKS, ids=lambda function: function.__name__)
def test_as_deepl_mock_answers(urls, function):
    found = {name: function(url) for name, url in urls.items()}
    assert found["ours"] == found["deepl-mock"], found
