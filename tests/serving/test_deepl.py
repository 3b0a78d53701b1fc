"""DeepL's API as DeepL's own clients use it, against a server of two models
(German -> English and English -> French): the official Python client
(`deepl`, its v2 calls and `DeepLClient`'s v3 multilingual glossaries),
the official Node client where node is, the exact requests of Weblate's
DeepL backend (both its generations) and of LibreOffice's; each answer
compared with the Keras runtime's own translation, a glossary obeyed
alike through DeepL's and LibreTranslate's APIs; usage's limit and
`model_type_used` as both clients read them; the glossary pairs advertised
being those accepted; deepl-node's documents, each refusal of an upload an
answer, and its polls 5 s apart on a kept connection; and each kind of bad
input answered with DeepL's status and one line. Traffic goes to
127.0.0.1 only."""

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time

import deepl
import docx
import httpx
import pytest
from starlette.testclient import TestClient

from helpers import processes, servers
from helpers.files import zip_bomb
from helpers.small_run import pair_runs
from keras_transformer import runtimes
from keras_transformer.documents import read_document
from keras_transformer.documents.html import Markup
from keras_transformer.documents.sentences import split_sentences
from keras_transformer.glossary import Glossary
from keras_transformer.serving import ServedModel, Settings, create_app
from keras_transformer.serving.glossary_store import Dictionary, GlossaryStore

KEY = "deepl-key"
TERMS = {"Haus": "Baum", "klein": "oder dort"}


@pytest.fixture(autouse=True)
def _seed():
    """Not reseeded between tests (see tests/serving/test_serve.py)."""


@pytest.fixture(scope="module")
def models(small_run, tmp_path_factory):
    return [ServedModel(runtimes.open_runtime(str(run), in_flight=1), *pair)
            for run, pair in zip(pair_runs(small_run, tmp_path_factory.mktemp("deepl-pair")),
                                 (("de", "en"), ("en", "fr")))]


@pytest.fixture(scope="module")
def glossaries_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("deepl-glossaries")


def _settings(models, glossaries_dir, **options):
    return Settings(models, api_keys={KEY}, glossaries_dir=str(glossaries_dir),
                    max_file_bytes=2**20, **options)


@pytest.fixture(scope="module")
def url(models, glossaries_dir):
    with servers.serving(create_app(_settings(models, glossaries_dir))) as url:
        yield url


@pytest.fixture(scope="module")
def translator(url):
    return deepl.Translator(KEY, server_url=url.rstrip("/"))


@pytest.fixture(scope="module")
def client(url):
    return deepl.DeepLClient(KEY, server_url=url.rstrip("/"))


def _expected(model, text, language, glossary=None):
    """`text` translated by the runtime as its sentences, joined back."""
    parts = split_sentences(text, language)
    found = model.runtime.translate(list(parts.sentences), glossary=glossary) \
        if glossary else model.runtime.translate(list(parts.sentences))
    return parts.join([hypotheses[0][0] for hypotheses in found])


def test_translate_text_one_and_a_list_with_and_without_the_source(translator, models):
    one = translator.translate_text("Das Haus ist groß. Der Baum war hier.", source_lang="DE",
                                    target_lang="EN-US")
    assert one.text == _expected(models[0], "Das Haus ist groß. Der Baum war hier.", "de")
    assert one.detected_source_lang == "DE" and one.billed_characters == 37
    texts = ["Das Haus ist klein.", "Der Baum ist groß und nicht hier."]
    listed = translator.translate_text(texts, target_lang="EN-GB")
    assert [result.text for result in listed] == [_expected(models[0], text, "de")
                                                  for text in texts]
    assert [result.detected_source_lang for result in listed] == ["DE", "DE"]
    # German -> French goes through English, as LibreTranslate's API takes it.
    through = translator.translate_text("Das Haus", source_lang="DE", target_lang="FR")
    english = models[0].runtime.translate(["Das Haus"])[0][0][0]
    assert through.text == models[1].runtime.translate([english])[0][0][0]


def test_tag_handling_html_keeps_the_markup(translator, models):
    html = "<p>Das <b>Haus</b> ist groß.</p><p>Der Baum</p>"
    answer = translator.translate_text(html, source_lang="DE", target_lang="EN-US",
                                       tag_handling="html")
    assert answer.text == models[0].runtime.translate_documents([html], "html")[0]
    assert answer.text.startswith("<p>") and answer.text.count("<b>") == 1


def test_a_glossary_made_by_create_glossary_is_obeyed_listed_and_deleted(translator, models):
    glossary = translator.create_glossary("terms", source_lang="DE", target_lang="EN",
                                          entries=TERMS)
    assert (glossary.source_lang, glossary.target_lang, glossary.entry_count) == ("DE", "EN", 2)
    text = "Dort war ein Haus. Es ist klein."
    answer = translator.translate_text(text, source_lang="DE", target_lang="EN-US",
                                       glossary=glossary)
    assert answer.text == _expected(models[0], text, "de", Glossary.of(TERMS.items(), "de"))
    assert "Baum" in answer.text and "oder dort" in answer.text
    assert glossary.glossary_id in [found.glossary_id for found in translator.list_glossaries()]
    assert translator.get_glossary(glossary.glossary_id).name == "terms"
    assert translator.get_glossary_entries(glossary) == TERMS
    translator.delete_glossary(glossary)
    with pytest.raises(deepl.GlossaryNotFoundException):
        translator.get_glossary(glossary.glossary_id)
    assert glossary.glossary_id not in [found.glossary_id
                                        for found in translator.list_glossaries()]


def test_any_entries_deepl_takes_are_taken(translator):
    """Terms that share a stem or differ in case, and terms that are no
    words: DeepL takes any text without a tab or a line break, and so does
    this server."""
    entries = {"Ärger": "anger", "ärgerlich": "annoying", "Arm": "arm", "arm": "poor",
               "🪨": "rock", "C++": "C++", "→": "->"}
    made = translator.create_glossary("any text", "DE", "EN", entries)
    assert made.entry_count == 7 and translator.get_glossary_entries(made) == entries
    translator.delete_glossary(made)


def test_a_multilingual_glossary_of_deepl_client(client, models):
    Entries = deepl.api_data.MultilingualGlossaryDictionaryEntries
    made = client.create_multilingual_glossary("both", [
        Entries("DE", "EN", {"Haus": "Baum"}), Entries("EN", "FR", {"tree": "arbre"})])
    assert sorted((found.source_lang, found.target_lang, found.entry_count)
                  for found in made.dictionaries) == [("DE", "EN", 1), ("EN", "FR", 1)]
    answer = client.translate_text("Das Haus", source_lang="DE", target_lang="EN-US",
                                   glossary=made)
    assert answer.text == _expected(models[0], "Das Haus", "de",
                                    Glossary.of([("Haus", "Baum")], "de"))
    updated = client.update_multilingual_glossary_dictionary(made, Entries("DE", "EN",
                                                                          {"klein": "small"}))
    assert next(found.entry_count for found in updated.dictionaries
                if found.source_lang == "DE") == 2
    client.replace_multilingual_glossary_dictionary(made, Entries("DE", "EN", {"Baum": "house"}))
    entries = client.get_multilingual_glossary_entries(made, "DE", "EN").dictionaries[0]
    assert entries.entries == "Baum\thouse"  # (the client hands on the TSV as sent)
    assert client.update_multilingual_glossary_name(made, "renamed").name == "renamed"
    client.delete_multilingual_glossary_dictionary(made, source_lang="EN", target_lang="FR")
    assert [(found.source_lang, found.target_lang)
            for found in client.get_multilingual_glossary(made.glossary_id).dictionaries] == [
        ("DE", "EN")]
    client.delete_multilingual_glossary(made)
    with pytest.raises(deepl.GlossaryNotFoundException):
        client.get_multilingual_glossary(made.glossary_id)


def test_languages_pairs_and_usage(translator):
    assert [(found.code, found.name) for found in translator.get_source_languages()] == [
        ("DE", "German"), ("EN", "English")]
    assert [(found.code, found.supports_formality)
            for found in translator.get_target_languages()] == [
        ("EN-GB", False), ("EN-US", False), ("FR", False)]
    assert [(pair.source_lang, pair.target_lang)
            for pair in translator.get_glossary_languages()] == [("de", "en"), ("en", "fr")]
    before = translator.get_usage().character.count
    translator.translate_text("Das Haus", source_lang="DE", target_lang="EN-US")
    usage = translator.get_usage()
    assert usage.character.count == before + len("Das Haus")
    # Without --char-quota, DeepL's very large limit: the client's usage is valid.
    assert usage.character.valid and usage.character.limit == 10**12
    assert str(usage.character) == f"{before + len('Das Haus')} of 1000000000000"
    assert not usage.any_limit_reached


def test_model_type_used_is_answered_where_model_type_is_sent(translator):
    """The Python client reads `model_type_used` whenever it sent
    `model_type`; DeepL leaves it out otherwise."""
    for sent, used in (("quality_optimized", "quality_optimized"),
                       ("prefer_quality_optimized", "quality_optimized"),
                       ("latency_optimized", "latency_optimized"), (None, None)):
        result = translator.translate_text("Das Haus", source_lang="DE", target_lang="EN-US",
                                           model_type=sent)
        assert result.model_type_used == used, sent
    with pytest.raises(deepl.DeepLException, match="model_type"):
        translator.translate_text("Das Haus", target_lang="EN-US", model_type="fastest")


def test_the_glossary_pairs_advertised_are_those_accepted(small_run, models, tmp_path):
    """/v2/glossary-language-pairs lists the pairs whose model obeys a
    glossary, and each is accepted; a pair a model serves with a search of
    its own (here continuous batching, --slots) is neither listed nor
    accepted, in one line that says why."""
    slots = ServedModel(runtimes.open_runtime(str(small_run), in_flight=1, slots=8), "en", "fr")
    settings = _settings([models[0], slots], tmp_path)
    with servers.serving(create_app(settings)) as url:
        client = deepl.DeepLClient(KEY, server_url=url.rstrip("/"))
        advertised = [(pair.source_lang, pair.target_lang)
                      for pair in client.get_glossary_languages()]
        assert advertised == [("de", "en")]
        for source, target in advertised:
            client.delete_glossary(client.create_glossary("ok", source, target, {"Haus": "Baum"}))
        with pytest.raises(deepl.DeepLException, match="the en-fr model's search obeys no "
                                                       "glossary .*with --slots") as refused:
            client.create_glossary("no", "EN", "FR", {"tree": "arbre"})
        assert refused.value.http_status_code == 400
        glossary_languages = httpx.get(url + "v3/languages", params={"resource": "glossary"},
                                       headers={"Authorization": f"DeepL-Auth-Key {KEY}"}).json()
        assert {(found["lang"], found["usable_as_source"], found["usable_as_target"])
                for found in glossary_languages} == {("de", True, False), ("en", False, True),
                                                     ("fr", False, False)}


@pytest.mark.slow
def test_translate_document_of_a_docx_and_an_html_file(translator, models, tmp_path):
    document = docx.Document()
    paragraph = document.add_paragraph("Das ist ")
    paragraph.add_run("ein großes").bold = True
    paragraph.add_run(" Haus.")
    document.add_paragraph("Der Baum war hier.")
    document.save(tmp_path / "brief.docx")
    (tmp_path / "seite.html").write_text("<p>Das <i>Haus</i> ist klein.</p>", encoding="utf-8")
    for name in ("brief.docx", "seite.html"):
        with open(tmp_path / name, "rb") as source, open(tmp_path / f"out-{name}", "wb") as out:
            status = translator.translate_document(source, out, source_lang="DE",
                                                   target_lang="EN-US")
        assert status.done and status.billed_characters > 0
    translated = docx.Document(tmp_path / "out-brief.docx")
    for original, new in zip(document.paragraphs, translated.paragraphs):
        assert new.text == _expected(models[0], original.text, "de")
    assert [run.bold for run in translated.paragraphs[0].runs].count(True) == 1
    html = (tmp_path / "out-seite.html").read_text(encoding="utf-8")
    assert html == translator.translate_text("<p>Das <i>Haus</i> ist klein.</p>",
                                             source_lang="DE", target_lang="EN-US",
                                             tag_handling="html").text


def _post(url, path, **request):
    return httpx.post(url + path, timeout=60, **request)


def test_weblate_requests_v2_generation(url):
    """Weblate 5 (v2 only): the language lists, the glossary pairs, its
    glossary found by name or created from TSV, and XML with its
    placeholders, which come back verbatim."""
    headers = {"Authorization": f"DeepL-Auth-Key {KEY}",
               "Accept": "application/json; charset=utf-8"}
    get = lambda path, **params: httpx.get(url + path, headers=headers, params=params, timeout=60)  # noqa: E731
    assert "DE" in [found["language"] for found in get("v2/languages", type="source").json()]
    targets = get("v2/languages", type="target").json()
    assert all("supports_formality" in found for found in targets)
    pairs = get("v2/glossary-language-pairs").json()["supported_languages"]
    assert {"source_lang": "de", "target_lang": "en"} in pairs
    name = "weblate:1:DE:EN:9e250d830c11d70f"
    assert name not in [found["name"] for found in get("v2/glossaries").json()["glossaries"]]
    created = _post(url, "v2/glossaries", headers=headers, json={
        "name": name, "source_lang": "DE", "target_lang": "EN", "entries": "Haus\tBaum",
        "entries_format": "tsv"})
    assert created.status_code == 201, created.text
    listed = {found["name"]: found for found in get("v2/glossaries").json()["glossaries"]}
    glossary_id = listed[name]["glossary_id"]
    text = 'Das Haus, <x id="7"></x>! &lt;&lt;foo&gt;&gt;'
    answer = _post(url, "v2/translate", headers=headers, json={
        "text": [text], "source_lang": "DE", "target_lang": "EN", "formality": "default",
        "tag_handling": "xml", "ignore_tags": ["x"], "context": "a button",
        "glossary_id": glossary_id, "model_type": "prefer_quality_optimized"})
    assert answer.status_code == 200, answer.text
    translated = answer.json()["translations"][0]["text"]
    assert translated.count('<x id="7"></x>') == 1 and "Baum" in translated
    assert "<<" not in translated  # its escaped text stays escaped
    assert _post(url, "v2/translate", headers=headers, json={
        "text": ["test"], "source_lang": "en", "target_lang": "de"}).status_code == 400
    assert httpx.delete(url + f"v2/glossaries/{glossary_id}", headers=headers).status_code == 204


def test_weblate_requests_v3_generation(url):
    """Weblate's newer backend: /v3/languages, a multilingual glossary
    created, its dictionary replaced and renamed, then used."""
    headers = {"Authorization": f"DeepL-Auth-Key {KEY}"}
    languages = httpx.get(url + "v3/languages", headers=headers,
                          params={"resource": "translate_text"}).json()
    usable = {found["lang"].upper(): (found["usable_as_source"], found["usable_as_target"],
                                      "formality" in found["features"])
              for found in languages}  # (Weblate reads them so)
    assert usable == {"DE": (True, False, False), "EN": (True, True, False),
                      "EN-GB": (False, True, False), "EN-US": (False, True, False),
                      "FR": (False, True, False)}
    glossary_languages = httpx.get(url + "v3/languages", headers=headers,
                                   params={"resource": "glossary"}).json()
    assert {found["lang"] for found in glossary_languages if found["usable_as_source"]} == {
        "de", "en"}
    created = _post(url, "v3/glossaries", headers=headers, json={
        "name": "weblate:1:DE:EN:aaaa", "dictionaries": [{
            "source_lang": "de", "target_lang": "en", "entries": "Haus\thouse",
            "entries_format": "tsv"}]})
    assert created.status_code == 201, created.text
    glossary_id = created.json()["glossary_id"]
    replaced = httpx.put(url + f"v3/glossaries/{glossary_id}/dictionaries", headers=headers,
                         json={"source_lang": "de", "target_lang": "en",
                               "entries": "Haus\tBaum", "entries_format": "tsv"})
    assert replaced.json() == {"source_lang": "de", "target_lang": "en", "entry_count": 1}
    renamed = httpx.patch(url + f"v3/glossaries/{glossary_id}", headers=headers,
                          json={"name": "weblate:1:DE:EN:bbbb"})
    assert renamed.json()["name"] == "weblate:1:DE:EN:bbbb"
    answer = _post(url, "v2/translate", headers=headers, json={
        "text": ['Ein Haus <x id="0"></x>'], "source_lang": "DE", "target_lang": "EN",
        "tag_handling": "xml", "ignore_tags": ["x"], "glossary_id": glossary_id})
    assert "Baum" in answer.json()["translations"][0]["text"]
    assert '<x id="0"></x>' in answer.json()["translations"][0]["text"]
    assert httpx.delete(url + f"v3/glossaries/{glossary_id}", headers=headers).status_code == 204


def test_libreoffice_request(url, models):
    """LibreOffice Writer: a form with auth_key, the text as HTML and
    tag_handling in the URL's query."""
    answer = _post(url, "v2/translate?tag_handling=html", content=(
        f"auth_key={KEY}&target_lang=EN-GB&text=%3Cspan%3EDas%20Haus%3C%2Fspan%3E").encode(),
                   headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert answer.status_code == 200, answer.text
    text = answer.json()["translations"][0]["text"]
    assert text.startswith("<span>") and text.endswith("</span>")
    assert text == f"<span>{_expected(models[0], 'Das Haus', 'de')}</span>"


NODE_CLIENT = os.path.join(processes.ROOT, ".node", "node_modules", "deepl-node")

needs_node = pytest.mark.skipif(
    shutil.which("node") is None or not os.path.isdir(NODE_CLIENT),
    reason="node or the npm package deepl-node is not installed (tools/run_tests.sh installs it "
           "into .node where npm is)")


def _node(body, **constants):
    """What the JavaScript `body` returns, run by node in an async function
    with deepl-node as `deepl`, `fs`, `sleep(ms)`, `failure(call)` (the
    error `call()` rejects with, as "Class: message") and each of
    `constants` (JSON values) by its name."""
    declared = "".join(f"const {name} = {json.dumps(value)};\n"
                       for name, value in constants.items())
    script = textwrap.dedent("""
        const deepl = require(%s);
        const fs = require('fs');
        const sleep = (ms) => new Promise(resolve => setTimeout(resolve, ms));
        const failure = async (call) => {
            try { await call(); return 'no error'; }
            catch (error) { return `${error.constructor.name}: ${error.message}`; }
        };
        %s
        (async () => { %s })().then(
            found => console.log(JSON.stringify(found)),
            error => { console.error(String(error)); process.exit(1); });
    """) % (json.dumps(NODE_CLIENT), declared, body)
    result = subprocess.run(["node", "-e", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@needs_node
def test_the_official_node_client(url, models):
    found = _node("""
        const translator = new deepl.Translator(KEY, {serverUrl: SERVER});
        const plain = await translator.translateText('Das Haus', 'de', 'en-US');
        const glossary = await translator.createGlossary(
            'node', 'de', 'en', new deepl.GlossaryEntries({entries: {Haus: 'Baum'}}));
        const listed = (await translator.listGlossaries()).map(g => g.glossaryId);
        const obeyed = await translator.translateText('Das Haus', 'de', 'en-US', {glossary});
        await translator.deleteGlossary(glossary);
        const after = (await translator.listGlossaries()).map(g => g.glossaryId);
        const usage = await translator.getUsage();
        return {plain: plain.text, obeyed: obeyed.text,
                listed: listed.includes(glossary.glossaryId),
                after: after.includes(glossary.glossaryId),
                usage: [usage.character.count > 0, usage.character.limit,
                        usage.anyLimitReached()]};
    """, KEY=KEY, SERVER=url.rstrip("/"))
    assert found == {"plain": _expected(models[0], "Das Haus", "de"),
                     "obeyed": _expected(models[0], "Das Haus", "de",
                                         Glossary.of([("Haus", "Baum")], "de")),
                     "listed": True, "after": False, "usage": [True, 10**12, False]}


@needs_node
def test_the_node_client_s_model_type_and_multilingual_glossaries(url, models):
    """deepl-node's `modelTypeUsed` for each `modelType`, and its
    DeepLClient's v3 glossaries, which it sends as forms
    (`dictionaries[0].source_lang`, ...): created, a dictionary merged and
    replaced (PATCH and PUT), read back, obeyed, deleted."""
    found = _node("""
        const client = new deepl.DeepLClient(KEY, {serverUrl: SERVER});
        const used = {};
        for (const modelType of ['quality_optimized', 'prefer_quality_optimized',
                                 'latency_optimized', undefined]) {
            const result = await client.translateText('Das Haus', 'de', 'en-US', {modelType});
            used[String(modelType)] = result.modelTypeUsed === undefined ? null
                                                                       : result.modelTypeUsed;
        }
        const pair = (sourceLangCode, targetLangCode, entries) => ({
            sourceLangCode, targetLangCode, entries: new deepl.GlossaryEntries({entries})});
        const made = await client.createMultilingualGlossary('node v3', [
            pair('de', 'en', {Haus: 'Baum'}), pair('en', 'fr', {tree: 'arbre'})]);
        const obeyed = (await client.translateText('Das Haus', 'de', 'en-US',
                                                   {glossary: made})).text;
        const merged = await client.updateMultilingualGlossaryDictionary(
            made, pair('de', 'en', {klein: 'oder dort'}));
        await client.replaceMultilingualGlossaryDictionary(made, pair('en', 'fr',
                                                                      {house: 'maison'}));
        const read = async (source, target) => (
            await client.getMultilingualGlossaryDictionaryEntries(made, source, target)
        ).entries.entries();
        const kept = {deEn: await read('de', 'en'), enFr: await read('en', 'fr')};
        await client.deleteMultilingualGlossary(made);
        return {used, obeyed, kept,
                counts: made.dictionaries.map(d => [d.sourceLangCode, d.targetLangCode,
                                                    d.entryCount]),
                mergedCounts: merged.dictionaries.map(d => d.entryCount).sort(),
                after: await failure(() => client.getMultilingualGlossary(made.glossaryId))};
    """, KEY=KEY, SERVER=url.rstrip("/"))
    assert found["used"] == {"quality_optimized": "quality_optimized",
                             "prefer_quality_optimized": "quality_optimized",
                             "latency_optimized": "latency_optimized", "undefined": None}
    assert sorted(found["counts"]) == [["de", "en", 1], ["en", "fr", 1]]
    assert found["obeyed"] == _expected(models[0], "Das Haus", "de",
                                        Glossary.of([("Haus", "Baum")], "de"))
    assert found["mergedCounts"] == [1, 2]
    assert found["kept"] == {"deEn": {"Haus": "Baum", "klein": "oder dort"},
                             "enFr": {"house": "maison"}}
    assert found["after"].startswith("GlossaryNotFoundError")


@needs_node
def test_the_node_client_s_documents_and_each_refusal_is_an_answer(url, models, tmp_path):
    """deepl-node's translateDocument of a .txt file, and of files refused
    (another type, empty, over the size limit, a wrong key): each an answer
    with its status and our line, never a dropped connection (no retries,
    so that none hides one)."""
    text = "Das Haus ist klein.\nDer Baum war hier."
    found = _node("""
        const options = {serverUrl: SERVER, maxRetries: 0};
        const translator = new deepl.Translator(KEY, options);
        const write = (name, data) => {
            fs.writeFileSync(`${DIR}/${name}`, data);
            return `${DIR}/${name}`;
        };
        const translate = (name, data, by = translator) => by.translateDocument(
            write(name, data), `${DIR}/out-${name}`, 'de', 'en-US');
        const status = await translate('brief.txt', TEXT);
        return {
            status: [status.done(), status.billedCharacters],
            translated: fs.readFileSync(`${DIR}/out-brief.txt`, 'utf8'),
            refused: {
                type: await failure(() => translate('brief.pdf', '%PDF-1.4')),
                empty: await failure(() => translate('empty.txt', '')),
                size: await failure(() => translate('big.txt',
                                                    'Das Haus ist groß. '.repeat(80000))),
                key: await failure(() => translate('other.txt', TEXT,
                                                   new deepl.Translator('not-a-key', options))),
            },
        };
    """, KEY=KEY, SERVER=url.rstrip("/"), DIR=str(tmp_path), TEXT=text)
    assert found["status"] == [True, len(text) - 1]  # (the line break is not billed)
    assert found["translated"] == "\n".join(_expected(models[0], line, "de")
                                            for line in text.splitlines())
    refused = found["refused"]
    assert "Invalid file data: a document is one of .txt" in refused["type"]
    assert "Invalid file data." in refused["empty"]
    assert "413" in refused["size"] and "over this server's limit" in refused["size"]
    assert refused["key"].startswith("DocumentTranslationError") and \
        "Authorization failed: the key is not known here" in refused["key"]
    for message in refused.values():
        assert message.startswith("DocumentTranslationError") and "socket" not in message
        assert "Connection" not in message


@pytest.mark.slow
@needs_node
def test_deepl_node_s_polls_five_seconds_apart_keep_their_connection(models, tmp_path):
    """`serve` keeps an idle connection for `--keep-alive` (75 s): one
    request, 6 s idle, and the same connection answers again (uvicorn's own
    5 s closed it under deepl-node's polls, which come every 5 s on kept
    connections: "socket hang up"). Then deepl-node itself, without
    retries, polls a document queued behind a long one across 5 s."""
    from keras_transformer.commands import serve

    port, = processes.free_ports(1)
    args = serve.parser().parse_args(["run", "--port", str(port), "--glossaries-dir",
                                      str(tmp_path / "glossaries")])
    url, stop = servers.in_thread(serve.server_config(args, models[:1]))
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        connection.request("GET", "/health")
        assert connection.getresponse().read() == b'{"status":"ok"}'
        first = connection.sock
        time.sleep(6)
        first.setblocking(False)
        with pytest.raises(BlockingIOError):  # nothing to read, not the end: still open
            first.recv(1, socket.MSG_PEEK)
        first.setblocking(True)
        connection.request("GET", "/health")
        assert connection.getresponse().status == 200 and connection.sock is first
        connection.close()
        long = httpx.post(url + "v2/document", data={"target_lang": "EN-US", "source_lang": "DE"},
                          files={"file": ("long.txt", "Das Haus ist groß. " * 1000)},
                          headers={"Authorization": "DeepL-Auth-Key k"}, timeout=60)
        assert long.status_code == 200, long.text
        found = _node("""
            const translator = new deepl.Translator('k', {serverUrl: SERVER, maxRetries: 0});
            fs.writeFileSync(`${DIR}/brief.txt`, 'Das Haus ist klein.');
            const started = Date.now();
            const status = await translator.translateDocument(
                `${DIR}/brief.txt`, `${DIR}/out.txt`, 'de', 'en-US');
            return [status.done(), (Date.now() - started) / 1000];
        """, SERVER=url.rstrip("/"), DIR=str(tmp_path))
        assert found[0] is True and found[1] >= 5, found  # (at least one poll, 5 s on)
    finally:
        stop()


def test_a_glossary_is_obeyed_alike_through_either_api(url, translator):
    """One glossary, kept through DeepL's API and sent inline through
    LibreTranslate's: the same translations, each with the term."""
    glossary = translator.create_glossary("both-apis", "DE", "EN", TERMS)
    texts = ["Das Haus ist groß.", "Hier war nicht ein Haus, es ist klein."]
    deepl_answer = [result.text for result in translator.translate_text(
        texts, source_lang="DE", target_lang="EN-US", glossary=glossary)]
    libre = _post(url, "translate", json={"q": texts, "source": "de", "target": "en",
                                          "api_key": KEY, "glossary": TERMS})
    assert libre.json()["translatedText"] == deepl_answer
    assert all("Baum" in text for text in deepl_answer) and "oder dort" in deepl_answer[1]
    translator.delete_glossary(glossary)


def test_glossaries_are_shared_by_servers_of_one_folder(models, glossaries_dir):
    """Two server processes' applications over one folder (replicas on a
    volume): what one creates or deletes, the other sees."""
    headers = {"Authorization": f"DeepL-Auth-Key {KEY}"}
    with TestClient(create_app(_settings(models, glossaries_dir))) as first, \
            TestClient(create_app(_settings(models, glossaries_dir))) as second:
        made = first.post("/v2/glossaries", headers=headers, json={
            "name": "shared", "source_lang": "de", "target_lang": "en",
            "entries": "Haus\tBaum"}).json()
        assert second.get(f"/v2/glossaries/{made['glossary_id']}", headers=headers).json() == made
        answer = second.post("/v2/translate", headers=headers, json={
            "text": ["Das Haus"], "source_lang": "de", "target_lang": "en-us",
            "glossary_id": made["glossary_id"]})
        assert "Baum" in answer.json()["translations"][0]["text"]
        first.delete(f"/v2/glossaries/{made['glossary_id']}", headers=headers)
        assert second.get(f"/v2/glossaries/{made['glossary_id']}",
                          headers=headers).status_code == 404


@pytest.mark.slow
def test_bad_input_gets_deepl_statuses_and_one_line(models, tmp_path):
    """Each mistake: DeepL's status and a `{"message"}` of one line, never
    a 500."""
    settings = _settings(models, tmp_path / "glossaries", char_quota=60,
                         max_stored_glossary_entries=1000)
    headers = {"Authorization": f"DeepL-Auth-Key {KEY}"}
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        made = client.post("/v2/glossaries", headers=headers, json={
            "name": "t", "source_lang": "de", "target_lang": "en",
            "entries": "Haus\tBaum"}).json()
        good = {"text": ["Das Haus"], "target_lang": "EN-US"}
        cases = [
            (dict(json=good), {}, 403, "Authorization"),
            (dict(json=good), {"Authorization": "DeepL-Auth-Key wrong"}, 403, "not known"),
            (dict(json=good), {"Authorization": f"Bearer {KEY}"}, 403, "DeepL-Auth-Key"),
            (dict(json={"target_lang": "EN-US"}), headers, 400, "'text' not specified"),
            (dict(json={"text": ["x"], "target_lang": "ES"}), headers, 400, "target_lang"),
            (dict(json=good | {"target_lang": "EN-XX"}), headers, 400, "target_lang"),
            (dict(json=good | {"glossary_id": made["glossary_id"]}), headers, 400,
             "requires the source_lang"),
            (dict(json=good | {"source_lang": "DE",
                               "glossary_id": "00000000-0000-0000-0000-000000000000"}),
             headers, 400, "Glossary not found"),
            (dict(json=good | {"source_lang": "DE", "glossary_id": "../../etc/passwd"}),
             headers, 400, "Glossary not found"),
            (dict(json=good | {"formality": "more"}), headers, 400, "formality"),
            (dict(json=good | {"tag_handling": "markdown"}), headers, 400, "tag_handling"),
            (dict(json=good | {"split_sentences": "2"}), headers, 400, "split_sentences"),
            (dict(content=b"{not json", headers={"Content-Type": "application/json"}), headers,
             400, "not JSON"),
        ]
        for request, sent_headers, status, message in cases:
            request = dict(request)
            request["headers"] = {**sent_headers, **request.get("headers", {})}
            answer = client.post("/v2/translate", **request)
            assert answer.status_code == status, (message, answer.text)
            text = answer.json()["message"]
            assert message in text and "\n" not in text, (message, text)

        def glossary(body, status, message, path="/v2/glossaries"):
            answer = client.post(path, headers=headers, json=body)
            assert answer.status_code == status, (message, answer.text)
            assert message in answer.json()["message"] and "\n" not in answer.json()["message"]

        pair = {"name": "g", "source_lang": "de", "target_lang": "en"}
        glossary(pair | {"source_lang": "fr", "entries": "a\tb"}, 400, "no model here")
        glossary(pair | {"entries": "Haus\tBaum\nnur eine Spalte"}, 400, "line 2")
        glossary(pair | {"entries": "Haus\tBaum\nHaus\tTurm"}, 400, "two targets")
        glossary(pair | {"entries": "a,b", "entries_format": "xlsx"}, 400, "entries_format")
        glossary(pair | {"entries": ""}, 400, "empty entries")
        glossary({"name": "g", "dictionaries": "x"}, 400, "dictionaries", "/v3/glossaries")
        glossary(pair | {"entries": "\n".join(f"Wort{i}\tword{i}" for i in range(1001))}, 413,
                 "1001 entries")
        huge = "\n".join(f"Wort{i}\tword{i}" for i in range(600_000))  # 10 MB
        glossary(pair | {"entries": huge}, 413, "over this server's limit")
        entries = client.get(f"/v2/glossaries/{made['glossary_id']}/entries",
                             headers=headers | {"Accept": "application/json"})
        assert entries.status_code == 415
        assert client.get("/v2/glossaries/nonsense", headers=headers).status_code == 404
        assert client.delete("/v2/glossaries/00000000-0000-0000-0000-000000000000",
                             headers=headers).status_code == 404
        # Documents: an unknown type, a zip bomb, a result fetched twice.
        unknown = client.post("/v2/document", headers=headers, data={"target_lang": "EN-US"},
                              files={"file": ("a.pdf", b"%PDF-1.4")})
        assert unknown.status_code == 400 and "Invalid file data" in unknown.json()["message"]
        bomb = client.post("/v2/document", headers=headers, data={"target_lang": "EN-US"},
                           files={"file": ("bomb.docx", zip_bomb())})
        assert bomb.status_code == 200
        _wait(client, bomb.json(), headers, "error")
        status = client.post(f"/v2/document/{bomb.json()['document_id']}", headers=headers,
                             json={"document_key": bomb.json()["document_key"]}).json()
        assert "unzips to" in status["error_message"]
        not_done = client.post(f"/v2/document/{bomb.json()['document_id']}/result",
                               headers=headers, json={"document_key": bomb.json()["document_key"]})
        assert not_done.status_code == 503 and "not done" in not_done.json()["message"]
        done = client.post("/v2/document", headers=headers, data={"target_lang": "EN-US"},
                           files={"file": ("a.txt", "Das Haus".encode())}).json()
        _wait(client, done, headers, "done")
        first = client.post(f"/v2/document/{done['document_id']}/result", headers=headers,
                            json={"document_key": done["document_key"]})
        again = client.post(f"/v2/document/{done['document_id']}/result", headers=headers,
                            json={"document_key": done["document_key"]})
        assert (first.status_code, again.status_code) == (200, 404)
        assert client.post(f"/v2/document/{done['document_id']}", headers=headers,
                           json={"document_key": "0" * 64}).status_code == 404
        # The quota: 60 characters, spent.
        spent = [client.post("/v2/translate", headers=headers, json={
            "text": ["Das Haus ist groß."], "target_lang": "EN-US"}).status_code
            for _ in range(4)]
        assert spent[-1] == 456 and 200 in spent
        usage = client.get("/v2/usage", headers=headers).json()
        assert usage["character_limit"] == 60 and usage["character_count"] <= 60


def test_requests_documents_and_query_strings_beyond_the_limits(models, tmp_path):
    """429 beyond --req-limit and beyond the documents held, 414 for an
    overlong query string, each in DeepL's body."""
    settings = _settings(models, tmp_path / "glossaries", req_limit=3, max_documents=1,
                         max_query_bytes=1000)
    headers = {"Authorization": f"DeepL-Auth-Key {KEY}"}
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        upload = dict(headers=headers, data={"target_lang": "EN-US", "source_lang": "DE"},
                      files={"file": ("a.txt", b"Das Haus")})
        assert client.post("/v2/document", **upload).status_code == 200
        held = client.post("/v2/document", **upload)
        assert held.status_code == 429 and "Too many documents" in held.json()["message"]
        answers = [client.get("/v2/usage", headers=headers) for _ in range(2)]
        assert [answer.status_code for answer in answers] == [200, 429]  # the 4th request
        assert "Slowdown" in answers[1].json()["message"]
        long = client.get("/v2/languages?type=source&x=" + "a" * 2000, headers=headers)
        assert long.status_code == 414 and "query string" in long.json()["message"]


def test_serve_keeps_glossaries_across_a_restart(models, tmp_path):
    """`serve --glossaries-dir DIR --char-quota N`, by the command's own
    options: a glossary created before a restart is there after it."""
    from keras_transformer.commands import serve

    def start():
        port, = processes.free_ports(1)
        args = serve.parser().parse_args(["run", "--port", str(port), "--glossaries-dir",
                                          str(tmp_path / "kept"), "--char-quota", "1000"])
        return servers.in_thread(serve.server_config(args, models[:1]))

    url, stop = start()
    try:
        translator = deepl.Translator("any-key", server_url=url.rstrip("/"))
        made = translator.create_glossary("kept", "DE", "EN", {"Haus": "Baum"})
        assert translator.get_usage().character.limit == 1000
    finally:
        stop()
    url, stop = start()
    try:
        translator = deepl.Translator("any-key", server_url=url.rstrip("/"))
        assert translator.get_glossary(made.glossary_id).name == "kept"
        assert translator.get_glossary_entries(made) == {"Haus": "Baum"}
    finally:
        stop()


def _wait(client, handed, headers, status, seconds=60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = client.post(f"/v2/document/{handed['document_id']}", headers=headers,
                            json={"document_key": handed["document_key"]}).json()["status"]
        if found == status:
            return
        assert found in ("queued", "translating"), found
        time.sleep(0.05)
    raise AssertionError(f"the document was not {status} in {seconds} s")


WRITER = """
import sys
from keras_transformer.serving.glossary_store import Dictionary, GlossaryStore
store = GlossaryStore(sys.argv[1])
entries = [(f"Wort{i}", f"word{i}") for i in range(20000)]
print("ready", flush=True)
while True:
    store.create("big", [Dictionary("de", "en", entries)])
"""


def test_glossaries_on_disk_survive_a_sigterm_in_the_middle_of_a_create(tmp_path):
    folder = tmp_path / "glossaries"
    store = GlossaryStore(str(folder))
    kept = store.create("kept", [Dictionary("de", "en", [("Haus", "Baum")])])
    for delay in (0.05, 0.2, 0.5):
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(folder)],
                                  stdout=subprocess.PIPE, text=True, env=processes.environment())
        assert writer.stdout.readline().strip() == "ready"
        time.sleep(delay)
        writer.send_signal(signal.SIGTERM)
        assert writer.wait(timeout=60) == -signal.SIGTERM
        writer.stdout.close()
    reopened = GlossaryStore(str(folder))  # (removes what a cut write left)
    found = reopened.list()
    assert found[0].glossary_id == kept.glossary_id and found[0].name == "kept"
    assert all(len(glossary.dictionaries[0].entries) == 20000 for glossary in found[1:])
    assert not [name for name in os.listdir(folder) if name.startswith(".tmp-")]
    assert reopened.compiled(kept.glossary_id, "de", "en").entries[0].targets == ("Baum",)


def test_xml_markup_keeps_ignored_tags_as_placeholders():
    """The reading behind `tag_handling=xml` and `ignore_tags`: every tag
    inline, an ignored element a placeholder copied as written, text
    escaped for XML."""
    markup = Markup(xml=True, ignore_tags=frozenset({"x"}))
    document = read_document('Ein <x id="1">nicht &amp; übersetzt</x> Haus\xa0<g>hier</g>.',
                             "de", "xml", markup=markup)
    assert document.sentences == ["Ein  Haus\xa0hier."]
    rendered = document.render([("A house\xa0here.", None)])
    assert '<x id="1">nicht &amp; übersetzt</x>' in rendered and "&nbsp;" not in rendered
    assert rendered.count("<g>") == 1 and rendered.endswith(".")
    html = read_document("<p>Ein <x>y</x> Haus</p>", "de", "html",
                         markup=Markup(ignore_tags=frozenset({"x"})))
    assert html.sentences == ["Ein  Haus"]
