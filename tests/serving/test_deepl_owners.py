"""What a client keeps through DeepL's API is its own, as on DeepL, where
a glossary belongs to the account that made it: with `--api-keys`, two
keys A and B through the official Python client (`deepl`, v2 calls and
`DeepLClient`'s v3 ones) and the Node client where node is. For each
call B makes with A's glossary or document, B gets what an id that does
not exist gets (the same status and message: nothing confirms that the id
exists), and A keeps everything. Also: the requests without a key as one
tenant of their own (`--api-keys-optional`), the bound per key, replicas
on one folder and a restart, a folder written before glossaries had
owners (tests/serving/data/glossaries-0.1.0, written by the store of
0.1.0) loading with nothing lost, and no key in clear in the folder.
Traffic goes to 127.0.0.1 only."""

import contextlib
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import uuid

import deepl
import pytest
from starlette.testclient import TestClient

from helpers import processes, servers
from helpers.small_run import pair_runs
from keras_transformer import runtimes
from keras_transformer.commands import serve
from keras_transformer.serving import ServedModel, Settings, create_app

A, B = "key-of-team-a-0f3c9d", "key-of-team-b-77e1aa"
TERMS = {"Haus": "Baum", "klein": "oder dort"}
UNKNOWN = str(uuid.uuid4())
"""A glossary id that names no glossary: what B is answered for A's must
be what it is answered for this."""

LEGACY = os.path.join(os.path.dirname(__file__), "data", "glossaries-0.1.0")
"""A folder of two glossaries written by the store of 0.1.0, before
glossaries had owners: "terms" (de-en) and "both" (de-en and en-fr)."""

Entries = deepl.api_data.MultilingualGlossaryDictionaryEntries


@pytest.fixture(autouse=True)
def _seed():
    """Not reseeded between tests (see tests/serving/test_serve.py)."""


@pytest.fixture(scope="module")
def models(small_run, tmp_path_factory):
    return [ServedModel(runtimes.open_runtime(str(run), in_flight=1), *pair)
            for run, pair in zip(pair_runs(small_run, tmp_path_factory.mktemp("owners-pair")),
                                 (("de", "en"), ("en", "fr")))]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("owners-glossaries")


def _settings(models, folder, **options):
    return Settings(models, api_keys={A, B}, glossaries_dir=str(folder), **options)


@pytest.fixture(scope="module")
def url(models, folder):
    with servers.serving(create_app(_settings(models, folder))) as url:
        yield url.rstrip("/")


def _refusal(call):
    """`(exception type, HTTP status, message)` of what `call()` raises."""
    with pytest.raises(deepl.DeepLException) as raised:
        call()
    return type(raised.value).__name__, raised.value.http_status_code, str(raised.value)


def _as_unknown(call, glossary_id, status=404):
    """Asserts that `call(glossary_id)` is refused as `call(UNKNOWN)` is:
    `status`, the same exception and message."""
    refused = _refusal(lambda: call(glossary_id))
    assert refused == _refusal(lambda: call(UNKNOWN)) and refused[1] == status, refused


def test_another_key_finds_nothing_of_a_v2_glossary_and_its_owner_keeps_it(url):
    a = deepl.Translator(A, server_url=url)
    b = deepl.Translator(B, server_url=url)
    used = {"a": a.get_usage().character.count, "b": b.get_usage().character.count}
    made = a.create_glossary("terms of a", "DE", "EN", TERMS)
    obeyed = a.translate_text("Das Haus ist klein.", source_lang="DE", target_lang="EN-US",
                              glossary=made).text
    assert "Baum" in obeyed and "oder dort" in obeyed
    assert made.glossary_id not in [found.glossary_id for found in b.list_glossaries()]
    for call in (b.get_glossary, b.get_glossary_entries, b.delete_glossary):
        _as_unknown(call, made.glossary_id)
    for call in (lambda glossary_id: b.translate_text("Das Haus", source_lang="DE",
                                                      target_lang="EN-US", glossary=glossary_id),
                 lambda glossary_id: b.translate_document_upload(
                     b"Das Haus", source_lang="DE", target_lang="EN-US", filename="a.txt",
                     glossary=glossary_id)):
        _as_unknown(call, made.glossary_id, 400)  # (DeepL's answer to an unknown id there)
    kept = a.get_glossary(made.glossary_id)
    assert (kept.name, kept.entry_count, kept.creation_time) == (
        "terms of a", 2, made.creation_time)
    assert a.get_glossary_entries(made) == TERMS
    assert made.glossary_id in [found.glossary_id for found in a.list_glossaries()]
    assert a.translate_text("Das Haus ist klein.", source_lang="DE", target_lang="EN-US",
                            glossary=made).text == obeyed
    assert a.get_usage().character.count == used["a"] + 2 * len("Das Haus ist klein.")
    assert b.get_usage().character.count == used["b"]  # (usage is counted per key)
    a.delete_glossary(made)
    _as_unknown(a.get_glossary, made.glossary_id)


def test_another_key_finds_nothing_of_a_v3_glossary_and_its_owner_keeps_it(url):
    a = deepl.DeepLClient(A, server_url=url)
    b = deepl.DeepLClient(B, server_url=url)
    made = a.create_multilingual_glossary("both of a", [
        Entries("DE", "EN", TERMS), Entries("EN", "FR", {"tree": "arbre"})])
    assert made.glossary_id not in [found.glossary_id
                                    for found in b.list_multilingual_glossaries()]
    for call in (b.get_multilingual_glossary,
                 lambda glossary_id: b.get_multilingual_glossary_entries(glossary_id, "DE", "EN"),
                 lambda glossary_id: b.update_multilingual_glossary_name(glossary_id, "renamed"),
                 lambda glossary_id: b.update_multilingual_glossary_dictionary(
                     glossary_id, Entries("DE", "EN", {"Baum": "house"})),
                 lambda glossary_id: b.replace_multilingual_glossary_dictionary(
                     glossary_id, Entries("DE", "EN", {"Baum": "house"})),
                 lambda glossary_id: b.delete_multilingual_glossary_dictionary(
                     glossary_id, source_lang="EN", target_lang="FR"),
                 b.delete_multilingual_glossary):
        _as_unknown(call, made.glossary_id)
    _as_unknown(lambda glossary_id: b.translate_text(
        "Das Haus", source_lang="DE", target_lang="EN-US", glossary=glossary_id),
        made.glossary_id, 400)
    kept = a.get_multilingual_glossary(made.glossary_id)
    assert kept.name == "both of a" and sorted(
        (found.source_lang, found.target_lang, found.entry_count)
        for found in kept.dictionaries) == [("DE", "EN", 2), ("EN", "FR", 1)]
    assert a.get_multilingual_glossary_entries(made, "DE", "EN").dictionaries[0].entries == \
        "Haus\tBaum\nklein\toder dort"
    assert "Baum" in a.translate_text("Das Haus", source_lang="DE", target_lang="EN-US",
                                      glossary=made).text
    a.delete_multilingual_glossary(made)


def test_another_key_finds_nothing_of_a_document(url):
    """The right id and document key are not enough: the document is its
    uploader's, and B is answered as for a document that does not exist."""
    a = deepl.Translator(A, server_url=url)
    b = deepl.Translator(B, server_url=url)
    handed = a.translate_document_upload(b"Das Haus ist klein.", source_lang="DE",
                                         target_lang="EN-US", filename="a.txt")
    unknown = deepl.DocumentHandle(uuid.uuid4().hex.upper(), handed.document_key)
    for call in (b.translate_document_get_status, b.translate_document_download):
        refused = _refusal(lambda: call(handed))
        assert refused == _refusal(lambda: call(unknown)) and refused[1] == 404, refused
    status = a.translate_document_wait_until_done(handed)
    assert status.done and status.billed_characters == len("Das Haus ist klein.")
    translated = a.translate_document_download(handed).content
    assert translated.decode("utf-8") == a.translate_text(
        "Das Haus ist klein.", source_lang="DE", target_lang="EN-US").text


def test_requests_without_a_key_are_one_tenant_apart_from_every_key(models, tmp_path):
    """`--api-keys-optional`: what the keyless requests keep, they share,
    and no key reaches it; nor do they reach a key's."""
    headers = {"Authorization": f"DeepL-Auth-Key {A}"}
    body = {"name": "n", "source_lang": "de", "target_lang": "en", "entries": "Haus\tBaum"}
    with TestClient(create_app(_settings(models, tmp_path, keys_required=False))) as client:
        keyless = client.post("/v2/glossaries", json=body).json()["glossary_id"]
        keyed = client.post("/v2/glossaries", headers=headers, json=body).json()["glossary_id"]
        listed = lambda **sent: [found["glossary_id"] for found in client.get(  # noqa: E731
            "/v2/glossaries", **sent).json()["glossaries"]]
        assert listed() == [keyless] and listed(headers=headers) == [keyed]
        for glossary_id, sent in ((keyed, {}), (keyless, {"headers": headers})):
            assert client.get(f"/v2/glossaries/{glossary_id}", **sent).json() == \
                client.get(f"/v2/glossaries/{UNKNOWN}", **sent).json() == {
                "message": "Glossary not found"}
            assert client.delete(f"/v2/glossaries/{glossary_id}", **sent).status_code == 404
        used = client.post("/v2/translate", json={"text": ["Das Haus"], "source_lang": "DE",
                                                  "target_lang": "EN-US",
                                                  "glossary_id": keyless})
        assert "Baum" in used.json()["translations"][0]["text"]
        assert client.get(f"/v2/glossaries/{keyless}").json()["name"] == "n"


def test_one_tenant_without_api_keys(models, tmp_path):
    """Without --api-keys, the server has one tenant, as before owners:
    what one key makes, any other key sees, uses and deletes."""
    with servers.serving(create_app(Settings(models, glossaries_dir=str(tmp_path)))) as url:
        first = deepl.Translator("any-key", server_url=url.rstrip("/"))
        other = deepl.Translator("another-key", server_url=url.rstrip("/"))
        made = first.create_glossary("one tenant", "DE", "EN", {"Haus": "Baum"})
        assert [found.glossary_id for found in other.list_glossaries()] == [made.glossary_id]
        assert "Baum" in other.translate_text("Das Haus", source_lang="DE",
                                              target_lang="EN-US", glossary=made).text
        other.delete_glossary(made)
        assert first.list_glossaries() == []


def test_each_key_may_keep_its_share_of_the_glossaries(models, tmp_path):
    """`--max-glossaries 4` with two keys: two each by default, so one key
    cannot take every slot; `--max-glossaries-per-key 3` lets one take
    three, and the fourth, another key's, fills the folder."""
    with servers.serving(create_app(_settings(models, tmp_path / "even",
                                              max_glossaries=4))) as url:
        a = deepl.Translator(A, server_url=url.rstrip("/"))
        b = deepl.Translator(B, server_url=url.rstrip("/"))
        kept = [a.create_glossary(f"a{index}", "DE", "EN", {"Haus": "Baum"}) for index in range(2)]
        with pytest.raises(deepl.QuotaExceededException, match="2 glossaries a key at most"):
            a.create_glossary("a2", "DE", "EN", {"Haus": "Baum"})
        for index in range(2):
            b.create_glossary(f"b{index}", "DE", "EN", {"Haus": "Baum"})
        with pytest.raises(deepl.QuotaExceededException):
            b.create_glossary("b2", "DE", "EN", {"Haus": "Baum"})
        a.delete_glossary(kept[0])
        a.create_glossary("a2", "DE", "EN", {"Haus": "Baum"})
        assert sorted(found.name for found in a.list_glossaries()) == ["a1", "a2"]
        assert sorted(found.name for found in b.list_glossaries()) == ["b0", "b1"]
    with servers.serving(create_app(_settings(models, tmp_path / "uneven", max_glossaries=4,
                                              max_glossaries_per_key=3))) as url:
        a = deepl.Translator(A, server_url=url.rstrip("/"))
        b = deepl.Translator(B, server_url=url.rstrip("/"))
        for index in range(3):
            a.create_glossary(f"a{index}", "DE", "EN", {"Haus": "Baum"})
        b.create_glossary("b0", "DE", "EN", {"Haus": "Baum"})
        with pytest.raises(deepl.QuotaExceededException, match="4 glossaries at most, of every "
                                                               "key together"):
            b.create_glossary("b1", "DE", "EN", {"Haus": "Baum"})


def test_the_default_share_counts_the_keyless_tenant(models):
    """`--max-glossaries` shared evenly: by the keys, and by the keyless
    requests too where keys are optional; all of it for one tenant."""
    assert Settings(models, max_glossaries=1000).max_glossaries_per_key == 1000
    assert Settings(models, api_keys={A, B}, max_glossaries=1000).max_glossaries_per_key == 500
    assert Settings(models, api_keys={A, B}, keys_required=False,
                    max_glossaries=1000).max_glossaries_per_key == 333


def test_owners_hold_across_replicas_of_one_folder_and_a_restart(models, tmp_path):
    """Two servers' applications over one folder (replicas on a volume),
    then a third after they stop: A's glossary is A's on each."""
    a = {"Authorization": f"DeepL-Auth-Key {A}"}
    b = {"Authorization": f"DeepL-Auth-Key {B}"}
    with TestClient(create_app(_settings(models, tmp_path))) as first, \
            TestClient(create_app(_settings(models, tmp_path))) as second:
        made = first.post("/v3/glossaries", headers=a, json={"name": "replicated", "dictionaries": [
            {"source_lang": "de", "target_lang": "en", "entries": "Haus\tBaum"}]}).json()
        assert second.get(f"/v3/glossaries/{made['glossary_id']}", headers=a).json() == made
        assert second.get("/v3/glossaries", headers=b).json() == {"glossaries": []}
        assert second.delete(f"/v3/glossaries/{made['glossary_id']}", headers=b).status_code == 404
        answer = second.post("/v2/translate", headers=b, json={
            "text": ["Das Haus"], "source_lang": "de", "target_lang": "en-us",
            "glossary_id": made["glossary_id"]})
        assert (answer.status_code, answer.json()) == (400, {"message": "Glossary not found"})
    with TestClient(create_app(_settings(models, tmp_path))) as restarted:
        assert restarted.get("/v3/glossaries", headers=a).json() == {"glossaries": [made]}
        assert restarted.get(f"/v3/glossaries/{made['glossary_id']}", headers=b).status_code == 404


OWNER = """
import sys
from keras_transformer.serving.glossary_store import GlossaryStore
print(GlossaryStore(sys.argv[1]).owner(sys.argv[2]))
"""


@pytest.mark.slow
def test_replicas_starting_together_agree_on_each_keys_owner(tmp_path):
    """Four processes at once on an empty folder: one salt is made, and
    each names the key alike (else a replica could not find what another
    kept for the same key)."""
    started = [subprocess.Popen([sys.executable, "-c", OWNER, str(tmp_path), A],
                                stdout=subprocess.PIPE, text=True, env=processes.environment())
               for _ in range(4)]
    names = {process.communicate(timeout=120)[0].strip() for process in started}
    assert len(names) == 1 and len(names.pop()) == 64
    assert [process.returncode for process in started] == [0] * 4
    assert sorted(os.listdir(tmp_path)) == [".lock", ".salt"]


def test_the_folder_holds_no_key(models, tmp_path):
    """Glossaries of two keys and of the keyless requests: no key, nor
    its plain SHA-256 (which a table of short keys would reverse), in any
    file's name or content."""
    body = {"name": "n", "dictionaries": [{"source_lang": "de", "target_lang": "en",
                                           "entries": "Haus\tBaum"}]}
    with TestClient(create_app(_settings(models, tmp_path, keys_required=False))) as client:
        for headers in ({"Authorization": f"DeepL-Auth-Key {A}"}, {},
                        {"Authorization": f"DeepL-Auth-Key {B}"}):
            assert client.post("/v3/glossaries", headers=headers, json=body).status_code == 201
    names, contents = [], b""
    for parent, folders, files in os.walk(tmp_path):
        names += folders + files
        for name in files:
            with open(os.path.join(parent, name), "rb") as file:
                contents += file.read()
    assert len([name for name in names if name.endswith(".json")]) == 3
    for key in (A, B):
        for written in (key, hashlib.sha256(key.encode()).hexdigest()):
            assert not any(written in name for name in names)
            assert written.encode() not in contents


def _legacy_folder(tmp_path):
    """A copy of the folder of 0.1.0: `(its path, {glossary id: the file's
    bytes})`."""
    folder = tmp_path / "glossaries"
    shutil.copytree(LEGACY, folder)
    written = {}
    for name in os.listdir(folder):
        written[name[:-len(".json")]] = (folder / name).read_bytes()
    return folder, written


def _said(function, *args):
    """`(standard output, standard error)` of `function(*args)`."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        function(*args)
    return out.getvalue(), err.getvalue()


def test_a_folder_of_0_1_0_stays_shared_with_a_warning_until_assigned(models, tmp_path):
    """`serve --api-keys` on a folder written before glossaries had owners:
    one warning line; both glossaries shared by A and B, whole. Started
    once with `--assign-glossaries A`: A's alone, their files the same
    bytes."""
    folder, written = _legacy_folder(tmp_path)
    (tmp_path / "keys.txt").write_text(f"{A}\n{B} 100\n")

    def start(*options):
        """`(what serve said at start, url, stop)`."""
        port, = processes.free_ports(1)
        args = serve.parser().parse_args(["run", "--port", str(port), "--api-keys",
                                          str(tmp_path / "keys.txt"), "--glossaries-dir",
                                          str(folder), *options])
        return _said(serve.own_glossaries, args), *servers.in_thread(
            serve.server_config(args, models))

    said, url, stop = start()
    try:
        out, err = said
        assert err.count("\n") == 1 and out == ""
        assert ("warning: 2 glossaries in --glossaries-dir" in err
                and "start once with --assign-glossaries KEY" in err), err
        for key in (A, B):
            client = deepl.DeepLClient(key, server_url=url.rstrip("/"))
            assert {found.glossary_id: found.name for found in
                    client.list_multilingual_glossaries()} == {
                glossary_id: json.loads(data)["name"] for glossary_id, data in written.items()}
            for glossary_id, data in written.items():
                for dictionary in json.loads(data)["dictionaries"]:
                    entries = client.get_multilingual_glossary_entries(
                        glossary_id, dictionary["source"], dictionary["target"])
                    assert entries.dictionaries[0].entries == "\n".join(
                        "\t".join(pair) for pair in dictionary["entries"])
                assert "Baum" in client.translate_text("Das Haus", source_lang="DE",
                                                       target_lang="EN-US",
                                                       glossary=glossary_id).text
    finally:
        stop()
    said, url, stop = start("--assign-glossaries", A)
    try:
        assert said[1] == "" and "Gave the 2 glossaries" in said[0]
        a = deepl.Translator(A, server_url=url.rstrip("/"))
        b = deepl.Translator(B, server_url=url.rstrip("/"))
        assert sorted(found.glossary_id for found in a.list_glossaries()) == sorted(written)
        assert b.list_glossaries() == []
        for glossary_id in written:
            _as_unknown(b.get_glossary, glossary_id)
            assert a.get_glossary_entries(glossary_id) == dict(
                json.loads(written[glossary_id])["dictionaries"][0]["entries"])
    finally:
        stop()
    moved = [os.path.join(parent, name) for parent, _, files in os.walk(folder)
             for name in files if name.endswith(".json")]
    assert sorted(os.path.basename(path)[:-5] for path in moved) == sorted(written)
    for path in moved:
        assert open(path, "rb").read() == written[os.path.basename(path)[:-5]]
    assert _said(serve.own_glossaries, serve.parser().parse_args([
        "run", "--api-keys", str(tmp_path / "keys.txt"), "--glossaries-dir", str(folder)])) == (
        "", "")  # none left without an owner: no warning


NODE_CLIENT = os.path.join(processes.ROOT, ".node", "node_modules", "deepl-node")


@pytest.mark.skipif(shutil.which("node") is None or not os.path.isdir(NODE_CLIENT),
                    reason="node or the npm package deepl-node is not installed "
                           "(tools/run_tests.sh installs it into .node where npm is)")
def test_the_official_node_client_with_two_keys(url):
    """deepl-node: B's calls with A's glossary each fail as with an id that
    names none (the same error class and message), and A's stays whole."""
    script = textwrap.dedent(f"""
        const deepl = require({json.dumps(NODE_CLIENT)});
        const server = {{serverUrl: {json.dumps(url)}}};
        const a = new deepl.Translator({json.dumps(A)}, server);
        const b = new deepl.Translator({json.dumps(B)}, server);
        const failure = async (call) => {{
            try {{ await call(); return 'no error'; }}
            catch (error) {{ return `${{error.constructor.name}}: ${{error.message}}`; }}
        }};
        (async () => {{
            const made = await a.createGlossary(
                'node', 'de', 'en', new deepl.GlossaryEntries({{entries: {{Haus: 'Baum'}}}}));
            const calls = {{
                get: (id) => b.getGlossary(id),
                entries: (id) => b.getGlossaryEntries(id),
                translate: (id) => b.translateText('Das Haus', 'de', 'en-US', {{glossary: id}}),
                remove: (id) => b.deleteGlossary(id),
            }};
            const refused = {{}};
            for (const [name, call] of Object.entries(calls)) {{
                refused[name] = [await failure(() => call(made.glossaryId)),
                                 await failure(() => call({json.dumps(UNKNOWN)}))];
            }}
            const listed = (await b.listGlossaries()).map(g => g.glossaryId);
            const kept = await a.getGlossaryEntries(made.glossaryId);
            await a.deleteGlossary(made);
            console.log(JSON.stringify({{refused, listedForB: listed.includes(made.glossaryId),
                                         kept: kept.entries()}}));
        }})().catch(error => {{ console.error(String(error)); process.exit(1); }});
    """)
    result = subprocess.run(["node", "-e", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["listedForB"] is False and found["kept"] == {"Haus": "Baum"}
    for name, (own, unknown) in found["refused"].items():
        assert own == unknown and "Glossary not found" in own, (name, own, unknown)
