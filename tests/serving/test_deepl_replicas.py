"""What DeepL's API keeps lives in one folder (`serve --state-dir`) that
replicas share and a restart finds: a document handed in to one server is
polled and fetched from another, and from a server started after the
first stopped; each document stays its key's on every replica; usage and
`--char-quota` are counted by every replica together; and a SIGTERM in
the middle of a document leaves the folder whole, the next server on it
translating the document. Through the official Python client (deepl 1.32)
where a client is involved. Traffic goes to 127.0.0.1 only."""

import json
import os
import signal
import time

import deepl
import pytest
from starlette.testclient import TestClient

from helpers import servers
from keras_transformer import runtimes
from keras_transformer.serving import ServedModel, Settings, create_app

A, B = "key-of-team-a-0f3c9d", "key-of-team-b-77e1aa"
TEXT = "Das Haus ist klein. Der Baum war hier."
LONG = "\n".join(f"Das Haus ist groß und der Baum war {'hier' if i % 2 else 'dort'}."
                 for i in range(800))
"""A document that takes seconds to translate (800 sentences, fewer than a
request may queue)."""


@pytest.fixture(autouse=True)
def _seed():
    """Not reseeded between tests (see tests/serving/test_serve.py)."""


@pytest.fixture(scope="module")
def models(small_run):
    return [ServedModel(runtimes.open_runtime(str(small_run), in_flight=1), "de", "en")]


def _app(models, state, **options):
    return create_app(Settings(models, api_keys={A, B}, state_dir=str(state), **options))


def _status(call):
    """The HTTP status of the DeepL exception `call()` raises."""
    with pytest.raises(deepl.DeepLException) as raised:
        call()
    return raised.value.http_status_code


def test_a_document_handed_in_to_one_replica_is_polled_and_fetched_from_another(
        models, tmp_path):
    """Two servers on one folder: A hands a document in to the first, with
    its glossary, polls and fetches it from the second, once, obeying the
    glossary; B finds it on neither; A's usage is one count on both."""
    with servers.serving(_app(models, tmp_path)) as first, \
            servers.serving(_app(models, tmp_path)) as second:
        a1 = deepl.Translator(A, server_url=first.rstrip("/"))
        a2 = deepl.Translator(A, server_url=second.rstrip("/"))
        b2 = deepl.Translator(B, server_url=second.rstrip("/"))
        terms = a1.create_glossary("terms", "DE", "EN", {"Haus": "Baum"})
        handed = a1.translate_document_upload(TEXT.encode(), source_lang="DE",
                                              target_lang="EN-US", filename="brief.txt",
                                              glossary=terms)
        assert _status(lambda: b2.translate_document_get_status(handed)) == 404
        assert _status(lambda: b2.translate_document_download(handed)) == 404
        status = a2.translate_document_wait_until_done(handed)
        assert status.done and status.billed_characters == len(TEXT) - 1  # (not the space)
        translated = a2.translate_document_download(handed).content.decode("utf-8")
        assert translated == a1.translate_text(TEXT, source_lang="DE", target_lang="EN-US",
                                               glossary=terms).text
        assert "Baum" in translated
        assert _status(lambda: a1.translate_document_get_status(handed)) == 404  # fetched once
        assert a1.get_usage().character.count == a2.get_usage().character.count == \
            status.billed_characters + len(TEXT)
        assert b2.get_usage().character.count == 0
    kept = _files(tmp_path)  # (no key, nor the document's key, in any file's name or bytes)
    for secret in (A, B, handed.document_key):
        assert not [name for name, data in kept.items()
                    if secret in name or secret.encode() in data], secret


def test_usage_and_the_quota_are_counted_by_every_replica_together(models, tmp_path):
    """--char-quota 50 on two replicas: 30 characters on one leave 20 on
    the other, for that key only."""
    headers = {key: {"Authorization": f"DeepL-Auth-Key {key}"} for key in (A, B)}
    thirty = {"text": ["Das Haus ist klein und so groß"], "target_lang": "EN-US"}
    with TestClient(_app(models, tmp_path, char_quota=50)) as first, \
            TestClient(_app(models, tmp_path, char_quota=50)) as second:
        assert first.post("/v2/translate", headers=headers[A], json=thirty).status_code == 200
        refused = second.post("/v2/translate", headers=headers[A], json=thirty)
        assert refused.status_code == 456 and refused.json() == {
            "message": "Quota for this billing period has been exceeded (30 of 50 characters "
                       "used)"}
        assert second.get("/v2/usage", headers=headers[A]).json() == {
            "character_count": 30, "character_limit": 50}
        assert second.post("/v2/translate", headers=headers[B], json=thirty).status_code == 200
    with TestClient(_app(models, tmp_path, char_quota=50)) as restarted:
        assert restarted.get("/v2/usage", headers=headers[A]).json()["character_count"] == 30


def test_a_document_handed_in_before_a_restart_is_fetched_after_it(models, tmp_path):
    """A long document handed in, the server stopped at once (its
    translation cut short, or not yet begun): a server started on the
    folder translates it, and A fetches it there."""
    with servers.serving(_app(models, tmp_path)) as url:
        a = deepl.Translator(A, server_url=url.rstrip("/"))
        handed = a.translate_document_upload(LONG.encode(), source_lang="DE",
                                             target_lang="EN-US", filename="long.txt")
    with servers.serving(_app(models, tmp_path)) as url:
        a = deepl.Translator(A, server_url=url.rstrip("/"))
        assert a.translate_document_wait_until_done(handed).done
        translated = a.translate_document_download(handed).content.decode("utf-8")
        assert translated.count("\n") == LONG.count("\n")


def _files(folder):
    """`{path relative to folder: bytes}` of every file below `folder`."""
    found = {}
    for parent, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(parent, name)
            with open(path, "rb") as file:
                found[os.path.relpath(path, folder)] = file.read()
    return found


@pytest.mark.slow
def test_a_sigterm_in_the_middle_of_a_document_leaves_the_folder_whole(small_run, tmp_path):
    """`serve --state-dir` stopped by SIGTERM while it translates a
    document: it exits 0, every file of the folder is whole (each JSON file
    parses, no temporary file is left, the upload is as sent, no result is
    half written), and a server started on the folder translates the
    document, which its key then fetches, as the server translates it."""
    state = tmp_path / "state"
    (tmp_path / "keys.txt").write_text(f"{A}\n")
    options = ("--state-dir", state, "--api-keys", tmp_path / "keys.txt")
    with open(tmp_path / "serve.log", "w") as log:
        # One sentence a batch, one batch at a time: seconds for the document.
        process, url = servers.start(small_run, *options, "--batch-tokens", 1, "--workers", 1,
                                     log=log)
        try:
            a = deepl.Translator(A, server_url=url.rstrip("/"))
            handed = a.translate_document_upload(LONG.encode(), source_lang="DE",
                                                 target_lang="EN-US", filename="long.txt")
            deadline = time.monotonic() + 120
            while (status := a.translate_document_get_status(handed).status.value) != \
                    "translating":
                assert status == "queued" and time.monotonic() < deadline, status
                time.sleep(0.05)
            time.sleep(0.5)  # (some sentences translated)
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=120) == 0
        finally:
            if process.poll() is None:
                process.kill()
        kept = _files(state)
        assert not [name for name in kept if os.path.basename(name).startswith(".tmp-")]
        statuses = {name: json.loads(data) for name, data in kept.items() if name.endswith(".json")}
        job = statuses[f"documents/{handed.document_id}.json"]
        assert job["status"] == "translating" and handed.document_key not in json.dumps(job)
        assert kept[f"documents/{handed.document_id}.upload"] == LONG.encode()
        assert f"documents/{handed.document_id}.result" not in kept
        # (Its own batches: the text of 800 sentences below, one a batch,
        # could outlast the client's timeout on a loaded machine.)
        process, url = servers.start(small_run, *options, log=log)
        try:
            a = deepl.Translator(A, server_url=url.rstrip("/"))
            assert a.translate_document_wait_until_done(handed).done
            translated = a.translate_document_download(handed).content.decode("utf-8")
            assert translated == a.translate_text(LONG, source_lang="DE",
                                                  target_lang="EN-US").text
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=120)
