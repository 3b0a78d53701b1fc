"""The HTTP application of `keras-transformer serve`: LibreTranslate's API over
one model or several, a page to try them, a health check and Prometheus
metrics (Starlette, an ASGI application; the command runs it on uvicorn).

    POST /translate        {"q": "Guten Morgen!", "source": "de", "target": "en"}
                           -> {"translatedText": "Good morning!"}
                           q may be a list (then translatedText is one); JSON,
                           form-encoded or multipart; "format": "text" or
                           "html"; "alternatives": n adds the n next best
                           translations (text); "source": "auto" detects each
                           text's language among those served and says which
                           in "detectedLanguage"; "api_key" where keys are
                           required
    POST /detect           {"q": "Guten Morgen!"} -> [{"language": "de",
                           "confidence": 97.0}, ...] (JSON or form)
    POST /translate_file   multipart: file (.txt, .html, .docx), source,
                           target -> {"translatedFileUrl": ".../download_file/NAME"}
    GET  /download_file/NAME   the translated file
    GET  /languages        [{"code": "de", "name": "German", "targets": ["en"]}, ...]
    GET  /health           {"status": "ok", "models": [...]}
    GET  /metrics          Prometheus' text format
    GET  /                 the page (?q=TEXT translates TEXT on opening)

A text is read as a document (`documents`): split into sentences, or, as
HTML, into the text of its blocks with its markup kept; its sentences are
translated in the batches of the model that translates its language pair
(`Batcher`, one queue a model), or through English where no model does but
two do via English (the pivot Argos Translate uses), and written back.

Errors are JSON, `{"error": "..."}`, one line each: 400 for a body that is
not JSON (or a form), a missing or wrongly typed field, an unknown format,
a language pair nothing here translates, a file that cannot be read; 403
for a missing or unknown API key; 404 and 405 for other paths and methods;
413 for a body over the size limit, or more sentences than the queue holds;
503 with Retry-After when the queue is full; 500 only for a fault of the
server's own.

Stopping is uvicorn's: it stops accepting connections, closes the idle
ones and lets the requests in flight finish; only then does the
application's lifespan end, stopping the batchers' workers.
"""

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import re
import tempfile
import time
import urllib.parse
import uuid

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client import generate_latest
from starlette.applications import Starlette
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from keras_transformer import documents
from keras_transformer.batch_defaults import default_batch_tokens
from keras_transformer.documents.alignment import compose
from keras_transformer.documents.detection import NONE, Detector
from keras_transformer.documents.docx import DocxDocument
from keras_transformer.serving.batcher import Batcher, QueueFull

LOG = logging.getLogger("keras_transformer.serving")
PAGE = os.path.join(os.path.dirname(__file__), "page.html")
PIVOT = "en"
"""The language a request goes through where no model translates its pair."""

LANGUAGE_NAMES = {
    "ar": "Arabic", "bg": "Bulgarian", "cs": "Czech", "da": "Danish", "de": "German",
    "el": "Greek", "en": "English", "es": "Spanish", "et": "Estonian", "fi": "Finnish",
    "fr": "French", "he": "Hebrew", "hi": "Hindi", "hu": "Hungarian", "id": "Indonesian",
    "it": "Italian", "ja": "Japanese", "ko": "Korean", "lt": "Lithuanian", "lv": "Latvian",
    "nl": "Dutch", "no": "Norwegian", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian",
    "ru": "Russian", "sk": "Slovak", "sl": "Slovenian", "sv": "Swedish", "tr": "Turkish",
    "uk": "Ukrainian", "zh": "Chinese",
}
"""Names of the languages `/languages` lists (LibreTranslate's, in English);
other codes are listed by their code."""

FILE_FORMATS = {".txt": "text", ".html": "html", ".htm": "html", ".docx": "docx"}
"""The files `/translate_file` takes, by extension."""


class _Refused(Exception):
    """A request the server answers with `status` and `{"error": message}`."""

    def __init__(self, status, message, headers=None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


@dataclasses.dataclass
class ServedModel:
    """One model of the server: a `runtimes.Runtime` and the language pair it
    translates; `name` (default: its folder's name) labels it in /health and
    /metrics."""

    runtime: object
    source: str
    target: str
    name: str = None

    def __post_init__(self):
        self.name = self.name or os.path.basename(os.path.normpath(self.runtime.path))


class Settings:
    """What the application serves and its limits.

    Args:
        models: the `ServedModel`s (one per language pair).
        api_keys: a set of keys one of which every request to /translate,
            /detect and /translate_file must carry (`api_key`), or None.
        max_request_bytes: the largest body accepted (413 beyond).
        max_file_bytes: the largest file /translate_file takes.
        max_queue: sentences that may wait at once, per model (503 beyond).
        batch_tokens: see `Batcher` (default: each runtime's own default).
        max_wait: see `Batcher`.
        workers: see `Batcher` (per model).
        retry_after: seconds a refused client is told to wait.
        files_dir: where translated files wait to be downloaded (default: a
            temporary folder); the oldest go beyond `kept_files`.
        kept_files: translated files kept for download.
    """

    def __init__(self, models, api_keys=None, max_request_bytes=262144,
                 max_file_bytes=8 * 2**20, max_queue=1024, batch_tokens=None, max_wait=0.03,
                 workers=2, retry_after=1, files_dir=None, kept_files=100):
        self.models = list(models)
        pairs = [(model.source, model.target) for model in self.models]
        if not self.models or len(set(pairs)) < len(pairs):
            raise ValueError(f"Serve one model per language pair; got the pairs {pairs}.")
        names = [model.name for model in self.models]
        for model in self.models:  # folders of one name ("model" twice): named by pair too
            if names.count(model.name) > 1:
                model.name = f"{model.name}-{model.source}-{model.target}"
        self.api_keys = api_keys
        self.max_request_bytes = max_request_bytes
        self.max_file_bytes = max_file_bytes
        self.max_queue = max_queue
        self.batch_tokens = batch_tokens
        self.max_wait = max_wait
        self.workers = workers
        self.retry_after = retry_after
        self.files_dir = files_dir
        self.kept_files = kept_files


class _Metrics:
    """The Prometheus metrics of one application (its own registry)."""

    def __init__(self, batchers):
        self.registry = CollectorRegistry()
        self.requests = Counter("translation_requests", "HTTP requests answered, by path and "
                                "status", ["path", "status"], registry=self.registry)
        self.latency = Histogram("translation_request_seconds", "Time to answer POST /translate",
                                 registry=self.registry,
                                 buckets=(.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30))
        self.sentences = Counter("translation_sentences", "Sentences translated, by model",
                                 ["model"], registry=self.registry)
        self.tokens = Counter("translation_source_tokens", "Source tokens translated, by model",
                              ["model"], registry=self.registry)
        queue = Gauge("translation_queue_sentences", "Sentences waiting for a batch, by model",
                      ["model"], registry=self.registry)
        for name, batcher in batchers.items():
            queue.labels(name).set_function(lambda batcher=batcher: batcher.queued)
        self.batch_sentences = Histogram("translation_batch_sentences", "Sentences a batch",
                                         ["model"], registry=self.registry,
                                         buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512))
        self.batch_seconds = Histogram("translation_batch_seconds", "Time to translate a batch",
                                       ["model"], registry=self.registry,
                                       buckets=(.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30))

    def observer(self, name):
        """What a model's batcher reports each batch to."""
        def observe(sentences, tokens, seconds):
            self.sentences.labels(name).inc(sentences)
            self.tokens.labels(name).inc(tokens)
            self.batch_sentences.labels(name).observe(sentences)
            self.batch_seconds.labels(name).observe(seconds)

        return observe


class _Routes:
    """Which models translate a language pair: the one that translates it,
    else the two that go through `PIVOT`."""

    def __init__(self, models):
        self.direct = {(model.source, model.target): model for model in models}
        self.sources = sorted({model.source for model in models})
        self.languages = sorted({code for model in models for code in (model.source,
                                                                        model.target)})

    def route(self, source, target):
        """The models a text goes through, in order; None where none do."""
        if (source, target) in self.direct:
            return [self.direct[source, target]]
        if (source, PIVOT) in self.direct and (PIVOT, target) in self.direct:
            return [self.direct[source, PIVOT], self.direct[PIVOT, target]]
        return None

    def targets(self, source):
        return sorted(target for target in self.languages
                      if target != source and self.route(source, target))


def create_app(settings):
    """The Starlette application serving `settings.models`."""
    routes = _Routes(settings.models)
    batchers = {model.name: Batcher(
        model.runtime,
        settings.batch_tokens or default_batch_tokens(model.runtime.decoding.beam_size),
        settings.max_wait, settings.max_queue, settings.workers) for model in settings.models}
    metrics = _Metrics(batchers)
    for name, batcher in batchers.items():
        batcher.observe = metrics.observer(name)
    detector = Detector(routes.sources)
    files_dir = settings.files_dir or tempfile.mkdtemp(prefix="keras-transformer-files-")

    @contextlib.asynccontextmanager
    async def lifespan(app):
        for batcher in batchers.values():
            batcher.start()
        try:
            yield
        finally:
            await asyncio.gather(*(asyncio.to_thread(batcher.stop)
                                   for batcher in batchers.values()))

    async def translate_sentences(route, sentences, n_best):
        """The n-best hypotheses of each sentence along `route`, and each
        hop's `(model, sources, best translations)`."""
        hypotheses, hops, current = None, [], sentences
        for index, model in enumerate(route):
            last = index == len(route) - 1
            try:
                hypotheses = await batchers[model.name].translate(current,
                                                                  n_best=n_best if last else 1)
            except QueueFull:
                raise _Refused(503, "The server is busy (its queue is full); try again shortly",
                               {"Retry-After": str(settings.retry_after)}) from None
            best = [found[0][0] for found in hypotheses]
            hops.append((model, current, best))
            current = best
        return hypotheses, hops

    async def align_marked(hops, marked):
        """The alignments of the sentences at indices `marked` with their
        final translations, each hop's made by its model and composed
        through the pivot."""
        alignments = None
        for model, sources, best in hops:
            hop = await asyncio.to_thread(model.runtime.align, [sources[i] for i in marked],
                                          [best[i] for i in marked])
            alignments = hop if alignments is None else [
                compose(first, second) for first, second in zip(alignments, hop)]
        return dict(zip(marked, alignments))

    async def translate_documents(route, read, n_best=1):
        """Translates the documents `read` along `route`: their renderings,
        and for plain text the alternatives of each (lists of str)."""
        sentences = [sentence for document in read for sentence in document.sentences]
        if len(sentences) > settings.max_queue:
            raise _Refused(413, f"{len(sentences)} sentences are more than this server queues "
                                f"({settings.max_queue}); send fewer at a time")
        hypotheses, hops = (await translate_sentences(route, sentences, n_best)
                            if sentences else ([], []))
        marked = documents.marked_sentences(read)
        alignments = await align_marked(hops, marked) if marked else {}
        rendered = documents.render_documents(read, [found[0][0] for found in hypotheses],
                                              alignments)
        alternatives, at = [], 0
        for document in read:
            mine = hypotheses[at:at + len(document.sentences)]
            at += len(document.sentences)
            if not document.aligned:
                alternatives.append([document.render([found[min(k, len(found) - 1)][0]
                                                      for found in mine])
                                     for k in range(1, n_best)])
        return rendered, alternatives

    def source_of(text, source, target, text_format):
        """`(language, detection)` of a text: `source`, or with "auto" the
        language detected in its words (`documents.text_of`) and
        LibreTranslate's `detectedLanguage` entry (text of blanks alone:
        none, and it is answered as it is)."""
        if source != "auto":
            return source, None
        if not text.strip():
            return None, dict(NONE)
        found = detector.detect(documents.text_of(text, text_format))[0]
        if found["confidence"] == 0 and not routes.route(found["language"], target):
            raise _Refused(400, "The language of a text could not be detected among those "
                                f"served ({', '.join(routes.sources)}); give its source")
        return found["language"], found

    def route_or_refuse(source, target):
        if source not in routes.languages:
            raise _Refused(400, f"{source} is not supported")
        if target not in routes.languages:
            raise _Refused(400, f"{target} is not supported")
        route = routes.route(source, target)
        if route is None:
            raise _Refused(400, f"{_name(target)} ({target}) is not available as a target "
                                f"language from {_name(source)} ({source})")
        return route

    async def translate(request):
        started = time.monotonic()
        fields = await _fields(request, settings.max_request_bytes)
        _check_key(fields, settings.api_keys)
        texts, is_list = _texts(fields.get("q"))
        source, target = _language(fields, "source"), _language(fields, "target")
        text_format = fields.get("format") or "text"
        if text_format not in documents.FORMATS:
            raise _Refused(400, f"{text_format} format is not supported: this server translates "
                                f"{' and '.join(documents.FORMATS)}")
        alternatives = _integer(fields.get("alternatives", 0), "alternatives")
        languages = [source_of(text, source, target, text_format) for text in texts]
        groups = {}
        for index, (language, _) in enumerate(languages):
            groups.setdefault(language, []).append(index)
        most = min(model.runtime.decoding.beam_size for model in settings.models) - 1
        if not 0 <= alternatives <= max(most, 0) or (alternatives and text_format == "html"):
            raise _Refused(400, f"Invalid request: alternatives must be from 0 to {max(most, 0)} "
                                "(the beam size less one), and 0 for html")
        translations, others = [None] * len(texts), [None] * len(texts)

        async def translate_group(language, indexes):
            if language is None:  # blank texts
                for index in indexes:
                    translations[index], others[index] = texts[index], []
                return
            route = route_or_refuse(language, target)
            read = [documents.read_document(texts[i], language, text_format) for i in indexes]
            rendered, found = await translate_documents(route, read, alternatives + 1)
            for slot, index in enumerate(indexes):
                translations[index] = rendered[slot]
                others[index] = found[slot] if found else []

        await asyncio.gather(*(translate_group(language, indexes)
                               for language, indexes in groups.items()))
        answer = {"translatedText": translations if is_list else translations[0]}
        if alternatives:
            answer["alternatives"] = others if is_list else others[0]
        if source == "auto":
            detected = [detection for _, detection in languages]
            answer["detectedLanguage"] = detected if is_list else detected[0]
        metrics.latency.observe(time.monotonic() - started)
        return JSONResponse(answer)

    async def detect(request):
        fields = await _fields(request, settings.max_request_bytes)
        _check_key(fields, settings.api_keys)
        texts, is_list = _texts(fields.get("q"))
        return JSONResponse(detector.detect_many(texts) if is_list else detector.detect(texts[0]))

    async def translate_file(request):
        fields = await _fields(request, settings.max_request_bytes + settings.max_file_bytes)
        _check_key(fields, settings.api_keys)
        upload = fields.get("file")
        if not isinstance(upload, _Upload):
            raise _Refused(400, "Invalid request: missing file parameter")
        source, target = _language(fields, "source"), _language(fields, "target")
        name = os.path.basename(upload.filename or "")
        extension = os.path.splitext(name)[1].lower()
        if extension not in FILE_FORMATS:
            raise _Refused(400, "Invalid request: file format not supported (give .txt, .html "
                                "or .docx)")
        if not upload.data:
            raise _Refused(400, "Invalid request: empty file")
        try:
            document = await asyncio.to_thread(_read_file, upload.data, FILE_FORMATS[extension],
                                               source, detector)
        except ValueError as error:  # a file that cannot be read: its one-line reason
            raise _Refused(400, f"Invalid request: {' '.join(str(error).split())}") from None
        language = document.language
        route = route_or_refuse(language, target)
        rendered, _ = await translate_documents(route, [document])
        data = rendered[0].encode("utf-8") if isinstance(rendered[0], str) else rendered[0]
        stored = f"{uuid.uuid4().hex}.{re.sub(r'[^A-Za-z0-9._-]', '_', name)}"
        await asyncio.to_thread(_store, files_dir, stored, data, settings.kept_files)
        url = str(request.url_for("download_file", filename=stored))
        return JSONResponse({"translatedFileUrl": url})

    async def download_file(request):
        stored = request.path_params["filename"]
        path = os.path.join(files_dir, stored)
        if not re.fullmatch(r"[0-9a-f]{32}\.[A-Za-z0-9._-]+", stored) or not os.path.isfile(path):
            raise _Refused(404, "No such file: it was never translated here, or is no longer "
                                "kept")
        return FileResponse(path, filename=stored.split(".", 1)[1])

    async def languages(request):
        return JSONResponse([{"code": code, "name": _name(code), "targets": routes.targets(code)}
                             for code in routes.languages])

    async def health(request):
        return JSONResponse({"status": "ok", "models": [
            {"model": model.name, "runtime": model.runtime.name,
             "languages": [model.source, model.target],
             "max_alternatives": max(model.runtime.decoding.beam_size - 1, 0),
             "aligns": model.runtime.aligns, "queued_sentences": batchers[model.name].queued}
            for model in settings.models]})

    async def prometheus(request):
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def page(request):
        with open(PAGE, encoding="utf-8") as file:
            return HTMLResponse(file.read())

    async def refused(request, error):
        return JSONResponse({"error": error.message}, status_code=error.status,
                            headers=error.headers)

    async def http_error(request, error):
        return JSONResponse({"error": error.detail}, status_code=error.status_code,
                            headers=getattr(error, "headers", None))

    async def fault(request, error):
        LOG.exception("Fault while answering %s %s", request.method, request.url.path)
        return JSONResponse({"error": f"Internal error: {type(error).__name__}"}, status_code=500)

    app = Starlette(
        routes=[Route("/", page), Route("/translate", translate, methods=["POST"]),
                Route("/detect", detect, methods=["POST"]),
                Route("/translate_file", translate_file, methods=["POST"]),
                Route("/download_file/{filename}", download_file, name="download_file"),
                Route("/languages", languages), Route("/health", health),
                Route("/metrics", prometheus)],
        exception_handlers={_Refused: refused, HTTPException: http_error, Exception: fault},
        lifespan=lifespan)
    return _Counted(app, metrics)


class _Counted:
    """The application, counting every answer by path and status (unknown
    paths counted as "other", so that scanners cannot grow the metrics)."""

    PATHS = ("/", "/translate", "/detect", "/translate_file", "/languages", "/health",
             "/metrics")

    def __init__(self, app, metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"] if scope["path"] in self.PATHS else (
            "/download_file" if scope["path"].startswith("/download_file/") else "other")

        async def counting_send(message):
            if message["type"] == "http.response.start":
                self.metrics.requests.labels(path, str(message["status"])).inc()
            await send(message)

        await self.app(scope, receive, counting_send)


@dataclasses.dataclass
class _Upload:
    filename: str
    data: bytes


def _name(code):
    return LANGUAGE_NAMES.get(code, code)


def _check_key(fields, keys):
    key = fields.get("api_key")
    if keys is not None and not (isinstance(key, str) and key in keys):
        raise _Refused(403, "Invalid API key")


def _language(fields, name):
    value = fields.get(name)
    if not isinstance(value, str) or not value:
        raise _Refused(400, f"Invalid request: missing {name} parameter")
    return value.lower()


class _FileDocument:
    """A file read as a document, with the language it is in."""

    def __init__(self, document, language):
        self.document, self.language = document, language
        self.sentences, self.aligned = document.sentences, document.aligned
        self.marked = document.marked

    def render(self, results):
        return self.document.render(results)


def _read_file(data, kind, source, detector):
    """The uploaded file as a document (`_FileDocument`); "auto" detects its
    language from its text."""
    if kind == "docx":
        probe = DocxDocument(data, "en")
        text = " ".join(probe.sentences)
    else:
        text = data.decode("utf-8", errors="replace")
    if source == "auto":
        source = detector.detect(documents.text_of(text, kind)[:5000])[0]["language"]
    if kind == "docx":
        return _FileDocument(DocxDocument(data, source), source)
    return _FileDocument(documents.read_document(text, source, kind), source)


def _store(folder, name, data, kept):
    """Writes a translated file for download, and removes the oldest beyond
    `kept`."""
    with open(os.path.join(folder, name), "wb") as file:
        file.write(data)
    stored = sorted((entry for entry in os.scandir(folder) if entry.is_file()),
                    key=lambda entry: entry.stat().st_mtime)
    for entry in stored[:-kept]:
        with contextlib.suppress(OSError):
            os.remove(entry.path)


async def _fields(request, limit):
    """The request's fields: a JSON object, or a form (urlencoded or
    multipart, its files as `_Upload`s), read up to `limit` bytes."""
    declared = request.headers.get("content-length")
    if declared and declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise _Refused(413, f"The request's body ({declared} bytes) is over this server's limit "
                            f"of {limit} bytes")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise _Refused(413, f"The request's body is over this server's limit of {limit} "
                                "bytes")
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/x-www-form-urlencoded":
        form = urllib.parse.parse_qs(body.decode("utf-8", errors="replace"),
                                     keep_blank_values=True)
        return {name: values if name == "q" and len(values) > 1 else values[-1]
                for name, values in form.items()}
    if kind == "multipart/form-data":
        async def replay():
            return {"type": "http.request", "body": body, "more_body": False}

        fields = {}
        async with Request(request.scope, replay).form() as form:
            for name in form:
                values = form.getlist(name)
                values = [_Upload(value.filename, await value.read())
                          if isinstance(value, UploadFile) else value for value in values]
                fields[name] = values if name == "q" and len(values) > 1 else values[-1]
        return fields
    try:
        fields = json.loads(body)
    except ValueError:
        raise _Refused(400, "Invalid request: the body is not JSON (or a form)") from None
    if not isinstance(fields, dict):
        raise _Refused(400, "Invalid request: the body must be a JSON object")
    return fields


def _texts(q):
    """`(texts, whether q was a list)`."""
    if isinstance(q, str) and q:
        return [q], False
    if isinstance(q, list) and q and all(isinstance(text, str) for text in q):
        return q, True
    if q is None or q == "" or q == []:
        raise _Refused(400, "Invalid request: missing q parameter")
    raise _Refused(400, "Invalid request: q must be a string or a list of strings")


def _integer(value, name):
    """A whole number given as a JSON number or a form's text."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    raise _Refused(400, f"Invalid request: {name} must be a whole number")
