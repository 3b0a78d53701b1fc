"""The HTTP application of `keras-transformer serve`: LibreTranslate's API
over one model, a page to try it, a health check and Prometheus metrics
(Starlette, an ASGI application; the command runs it on uvicorn).

    POST /translate   {"q": "Guten Morgen!", "source": "de", "target": "en"}
                      -> {"translatedText": "Good morning!"}
                      q may be a list (then translatedText is one); JSON,
                      form-encoded or multipart; "alternatives": n adds the
                      n next best translations; "format": "text"; "source":
                      "auto" means the model's source language (nothing is
                      detected; the answer says which it took, as
                      LibreTranslate's does); "api_key" where keys are required
    GET  /languages   [{"code": "de", "name": "German", "targets": ["en"]}, ...]
    GET  /health      {"status": "ok", ...}
    GET  /metrics     Prometheus' text format
    GET  /            the page (?q=TEXT translates TEXT on opening)

Errors are JSON, `{"error": "..."}`: 400 for a body that is not JSON (or
form), a missing or wrongly typed field or a language pair the model does
not translate; 403 for a missing or unknown API key; 404 and 405 for other
paths and methods; 413 for a body over the size limit, or more sentences
than the queue holds; 503 with Retry-After when the queue is full; 500 only
for a fault of the server's own.

Stopping is uvicorn's: it stops accepting connections, closes the idle
ones and lets the requests in flight finish; only then does the
application's lifespan end, stopping the batcher's workers.
"""

import asyncio
import contextlib
import json
import logging
import os
import time
import urllib.parse

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client import generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from keras_transformer.serving.batcher import Batcher, QueueFull

LOG = logging.getLogger("keras_transformer.serving")
PAGE = os.path.join(os.path.dirname(__file__), "page.html")

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


class _Refused(Exception):
    """A request the server answers with `status` and `{"error": message}`."""

    def __init__(self, status, message, headers=None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


class Settings:
    """What the application serves and its limits.

    Args:
        runtime: a `runtimes.Runtime`.
        source_language: the model's source language code.
        target_language: the model's target language code.
        api_keys: a set of keys one of which every request to /translate
            must carry (`api_key`), or None for none.
        max_request_bytes: the largest body accepted (413 beyond).
        max_queue: sentences that may wait at once (503 beyond).
        batch_tokens: see `Batcher`.
        max_wait: see `Batcher`.
        workers: see `Batcher`.
        retry_after: seconds a refused client is told to wait.
    """

    def __init__(self, runtime, source_language, target_language, api_keys=None,
                 max_request_bytes=262144, max_queue=1024, batch_tokens=2048, max_wait=0.03,
                 workers=2, retry_after=1):
        self.runtime = runtime
        self.source_language = source_language
        self.target_language = target_language
        self.api_keys = api_keys
        self.max_request_bytes = max_request_bytes
        self.max_queue = max_queue
        self.batch_tokens = batch_tokens
        self.max_wait = max_wait
        self.workers = workers
        self.retry_after = retry_after


class _Metrics:
    """The Prometheus metrics of one application (its own registry)."""

    def __init__(self, batcher_queue):
        self.registry = CollectorRegistry()
        self.requests = Counter("translation_requests", "HTTP requests answered, by path and "
                                "status", ["path", "status"], registry=self.registry)
        self.latency = Histogram("translation_request_seconds", "Time to answer POST /translate",
                                 registry=self.registry,
                                 buckets=(.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30))
        self.sentences = Counter("translation_sentences", "Sentences translated",
                                 registry=self.registry)
        self.tokens = Counter("translation_source_tokens", "Source tokens translated",
                              registry=self.registry)
        self.queue = Gauge("translation_queue_sentences", "Sentences waiting for a batch",
                           registry=self.registry)
        self.queue.set_function(batcher_queue)
        self.batch_sentences = Histogram("translation_batch_sentences", "Sentences a batch",
                                         registry=self.registry,
                                         buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512))
        self.batch_seconds = Histogram("translation_batch_seconds", "Time to translate a batch",
                                       registry=self.registry,
                                       buckets=(.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30))

    def observe_batch(self, sentences, tokens, seconds):
        self.sentences.inc(sentences)
        self.tokens.inc(tokens)
        self.batch_sentences.observe(sentences)
        self.batch_seconds.observe(seconds)


def create_app(settings):
    """The Starlette application serving `settings.runtime`."""
    runtime = settings.runtime
    batcher = Batcher(runtime, settings.batch_tokens, settings.max_wait, settings.max_queue,
                      settings.workers)
    metrics = _Metrics(lambda: batcher.queued)
    batcher.observe = metrics.observe_batch
    most_alternatives = max(runtime.decoding.beam_size - 1, 0)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        batcher.start()
        try:
            yield
        finally:
            await asyncio.to_thread(batcher.stop)

    async def translate(request):
        started = time.monotonic()
        fields = await _fields(request, settings.max_request_bytes)
        key = fields.get("api_key")
        if settings.api_keys is not None and not (isinstance(key, str)
                                                  and key in settings.api_keys):
            raise _Refused(403, "Invalid API key")
        sentences, is_list = _sentences(fields.get("q"))
        source, target = fields.get("source"), fields.get("target")
        for name, value in (("source", source), ("target", target)):
            if not isinstance(value, str) or not value:
                raise _Refused(400, f"Invalid request: missing {name} parameter")
        if (source not in ("auto", settings.source_language)
                or target != settings.target_language):
            raise _Refused(400, f"{source} -> {target} is not translated here: this model "
                                f"translates {settings.source_language} -> "
                                f"{settings.target_language} (GET /languages)")
        if fields.get("format", "text") != "text":
            raise _Refused(400, f"format {fields['format']!r} is not supported: this server "
                                "translates plain text (format \"text\")")
        alternatives = _integer(fields.get("alternatives", 0), "alternatives")
        if not 0 <= alternatives <= most_alternatives:
            raise _Refused(400, f"Invalid request: alternatives must be from 0 to "
                                f"{most_alternatives} (the beam size less one)")
        if len(sentences) > settings.max_queue:
            raise _Refused(413, f"{len(sentences)} sentences are more than this server queues "
                                f"({settings.max_queue}); send fewer at a time")
        try:
            results = await batcher.translate(sentences, n_best=alternatives + 1)
        except QueueFull:
            raise _Refused(503, "The server is busy (its queue is full); try again shortly",
                           {"Retry-After": str(settings.retry_after)}) from None
        best = [hypotheses[0][0] for hypotheses in results]
        answer = {"translatedText": best if is_list else best[0]}
        if alternatives:
            others = [[text for text, _ in hypotheses[1:]] for hypotheses in results]
            answer["alternatives"] = others if is_list else others[0]
        if source == "auto":
            detected = {"confidence": 100.0, "language": settings.source_language}
            answer["detectedLanguage"] = [detected] * len(best) if is_list else detected
        metrics.latency.observe(time.monotonic() - started)
        return JSONResponse(answer)

    async def languages(request):
        listed = [{"code": settings.source_language, "targets": [settings.target_language]},
                  {"code": settings.target_language, "targets": []}]
        return JSONResponse([{"code": entry["code"],
                              "name": LANGUAGE_NAMES.get(entry["code"], entry["code"]),
                              "targets": entry["targets"]} for entry in listed])

    async def health(request):
        body = {"status": "ok", "runtime": runtime.name,
                "model": os.path.basename(os.path.normpath(runtime.path)),
                "languages": [settings.source_language, settings.target_language],
                "max_alternatives": most_alternatives, "queued_sentences": batcher.queued}
        return JSONResponse(body)

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
                Route("/languages", languages), Route("/health", health),
                Route("/metrics", prometheus)],
        exception_handlers={_Refused: refused, HTTPException: http_error, Exception: fault},
        lifespan=lifespan)
    return _Counted(app, metrics)


class _Counted:
    """The application, counting every answer by path and status (unknown
    paths counted as "other", so that scanners cannot grow the metrics)."""

    PATHS = ("/", "/translate", "/languages", "/health", "/metrics")

    def __init__(self, app, metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"] if scope["path"] in self.PATHS else "other"

        async def counting_send(message):
            if message["type"] == "http.response.start":
                self.metrics.requests.labels(path, str(message["status"])).inc()
            await send(message)

        await self.app(scope, receive, counting_send)


async def _fields(request, limit):
    """The request's fields: a JSON object, or a form (urlencoded or
    multipart), read up to `limit` bytes."""
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

        async with Request(request.scope, replay).form() as form:
            return {name: form.getlist(name) if name == "q" and len(form.getlist(name)) > 1
                    else form[name] for name in form}
    try:
        fields = json.loads(body)
    except ValueError:
        raise _Refused(400, "Invalid request: the body is not JSON (or a form)") from None
    if not isinstance(fields, dict):
        raise _Refused(400, "Invalid request: the body must be a JSON object")
    return fields


def _sentences(q):
    """`(sentences, whether q was a list)`."""
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
