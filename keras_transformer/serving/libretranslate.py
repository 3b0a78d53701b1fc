"""LibreTranslate's API over the server's models, as LibreTranslate 1.9.6
defines it in its code (`libretranslate/app.py`) and its tests, checked
against LibreTranslate itself (tests/serving/test_against_libretranslate.py).

    POST /translate        {"q": "Guten Morgen!", "source": "de", "target": "en"}
                           -> {"translatedText": "Good morning!"}
                           q a string or a list (then translatedText is one);
                           "format" text or html; "alternatives": n adds up
                           to n next best translations (text; [] for html);
                           "source": "auto" detects each text's language and
                           says which in "detectedLanguage"; "glossary": a
                           served glossary's name, or its entries (ours);
                           "quality": true adds each translation's
                           "confidence" (0-1, or null) and "flags" (ours:
                           docs/trust.md)
    POST /detect           {"q": "Guten Morgen!"} -> [{"language": "de",
                           "confidence": 97.0}, ...]
    POST /translate_file   multipart: file (.txt, .html, .docx), source,
                           target -> {"translatedFileUrl": ".../download_file/NAME"}
    GET  /download_file/NAME   the translated file, as an attachment
    GET  /languages        [{"code": "de", "name": "German", "targets": ["en"]}, ...]
    GET  /frontend/settings    the limits and defaults a page or client reads
    POST /suggest          {"q", "s", "source", "target"}: a better
                           translation, stored (with --suggestions; else 403)
    GET  /spec             this API as an OpenAPI document
    GET  /health           {"status": "ok"}
    GET  /models           each model (its runtime, pair, queue) and each
                           served glossary (ours)
    GET  /metrics          Prometheus' text format
    GET  /                 the page (?q=TEXT translates TEXT on opening)

Fields come as LibreTranslate reads them: from a JSON body alone, or else
from the query string and a form (urlencoded or multipart), a name's first
value, the query's before the form's (`merged_fields`). One extension: a
form that repeats `q` sends a list (LibreTranslate takes the first).

Errors are `{"error": "..."}`, one line, with LibreTranslate's statuses and
wording: 400 for a missing or wrong field, a language or pair not served,
a text over `--char-limit` or a list over `--batch-limit`, and a missing
key where keys are required; 403 for a wrong key and for what is turned
off; 429 beyond `--req-limit` requests a minute; and the server's own
limits besides (413 for a body or a request over what it queues, 414 for
an overlong query string, 503 with Retry-After while its queue is full).
"""

import asyncio
import os
import time

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from keras_transformer import documents
from keras_transformer.glossary import Glossary, GlossaryError
from keras_transformer.serving import bodies, openapi
from keras_transformer.serving.errors import Refused
from keras_transformer.serving.limits import NO_LIMIT, RequestLimits
from keras_transformer.serving.service import FILE_FORMATS, language_name

PAGE = os.path.join(os.path.dirname(__file__), "page.html")
FRONTEND_TIMEOUT = 500
"""LibreTranslate's default `frontendTimeout` (ms): how long its page waits
after typing before it translates."""

PATHS = ("/", "/translate", "/detect", "/translate_file", "/download_file", "/languages",
         "/frontend/settings", "/suggest", "/spec", "/health", "/models", "/metrics")
"""The paths of this API (for the metrics' labels)."""


def merged_fields(sent):
    """The fields of a request (`bodies.Sent`) as LibreTranslate reads them:
    a JSON body's object alone; else each name's first value, the query
    string's before the form's (Flask's `request.values`), and `q` sent
    several times a list."""
    if sent.json is not None:
        return sent.json
    fields = {}
    for pairs in (sent.query, sent.form):
        values = {}
        for name, value in pairs:
            values.setdefault(name, []).append(value)
        for name, found in values.items():
            if name not in fields:
                fields[name] = found if name == "q" and len(found) > 1 else found[0]
    return fields


def _texts(q):
    """`(texts, whether q was a list)`."""
    if isinstance(q, str) and q:
        return [q], False
    if isinstance(q, list) and q and all(isinstance(text, str) for text in q):
        return q, True
    if not q:
        raise Refused(400, "Invalid request: missing q parameter")
    raise Refused(400, "Invalid request: q must be a string or a list of strings")


def _required(fields, name):
    value = fields.get(name)
    if not isinstance(value, str) or not value:
        raise Refused(400, f"Invalid request: missing {name} parameter")
    return value


def _language(fields, name):
    return _required(fields, name).lower()


def _quality(value):
    """The `quality` field (ours: LibreTranslate has none): whether to give
    each translation's confidence and flags. true or false, as JSON, a form
    or a query string writes it."""
    if value in (None, "", False, 0) or str(value).lower() in ("false", "0"):
        return False
    if value is True or value == 1 or str(value).lower() in ("true", "1"):
        return True
    raise Refused(400, "Invalid request: quality must be true or false")


def _alternatives(value):
    """LibreTranslate's count of alternatives: a whole number (as a JSON
    number or a form's text), a negative one counted as 0."""
    if isinstance(value, bool):
        value = None
    try:
        return max(0, int(value))
    except (TypeError, ValueError, OverflowError):
        raise Refused(400, "Invalid request: alternatives parameter is not a number") from None


class LibreTranslateApi:
    """The routes of LibreTranslate's API over `service` (a
    `service.Service`), by `settings` (`app.Settings`)."""

    def __init__(self, service, settings):
        self.service, self.settings = service, settings
        self.limits = RequestLimits(settings.req_limit)

    def routes(self):
        files = self.settings.max_request_bytes + self.settings.max_file_bytes
        return [Route("/", self.page),
                Route("/translate", self._guarded(self.translate), methods=["POST"]),
                Route("/detect", self._guarded(self.detect), methods=["POST"]),
                Route("/translate_file", self._guarded(self.translate_file, files),
                      methods=["POST"]),
                Route("/download_file/{filename}", self.download_file, name="download_file"),
                Route("/languages", self.languages),
                Route("/frontend/settings", self.frontend_settings),
                Route("/suggest", self.suggest, methods=["POST"]),
                Route("/spec", self.spec), Route("/health", self.health),
                Route("/models", self.models), Route("/metrics", self.prometheus)]

    async def _fields(self, request, max_body_bytes=None):
        sent = await bodies.read(request, max_body_bytes or self.settings.max_request_bytes)
        fields = merged_fields(sent)
        if sent.json is None:  # LibreTranslate's line endings for what forms send
            fields = {name: "\n".join(value.splitlines()) if isinstance(value, str) else value
                      for name, value in fields.items()}
        return fields

    def _guarded(self, handler, max_body_bytes=None):
        """The route of an endpoint LibreTranslate's access check guards
        (/translate, /detect, /translate_file): the request's fields read
        (within `max_body_bytes`), then `handler(request, fields)`; with
        `--metrics`, measured as LibreTranslate measures these endpoints
        (`metrics.LibreTranslateMetrics`)."""
        metrics = self.service.metrics.libretranslate

        async def plain(request):
            return await handler(request, await self._fields(request, max_body_bytes))

        async def measured(request):
            started, endpoint = time.perf_counter(), request.url.path
            address, key, status = metrics.address(request), "", 500
            try:
                fields = await self._fields(request, max_body_bytes)
                key = self._known_key(fields)
                with metrics.in_flight.labels(endpoint, address, key).track_inprogress():
                    response = await handler(request, fields)
                status = response.status_code
                return response
            except (Refused, HTTPException) as error:
                status = error.status if isinstance(error, Refused) else error.status_code
                if status == 403:  # (a refused key is not recorded, as LibreTranslate's)
                    key = ""
                raise
            finally:
                metrics.duration.labels(endpoint, status, address, key).observe(
                    time.perf_counter() - started)

        return plain if metrics is None else measured

    def _known_key(self, fields):
        """A request's `api_key` where it is one of the server's keys, else
        "" (a metric's label: `metrics.LibreTranslateMetrics`)."""
        key = fields.get("api_key")
        return key if isinstance(key, str) and key in (self.settings.api_keys or ()) else ""

    def _client(self, request, fields):
        """`(limit key, the API key's Key or None)`: LibreTranslate's access
        check (a wrong key 403, a missing one 400 where keys are required)
        and the client its request limit counts for (its key, else its
        address)."""
        keys = self.settings.api_keys
        address = request.client.host if request.client else "unknown"
        if keys is None:
            return address, None
        key = fields.get("api_key")
        if key:
            if not isinstance(key, str) or key not in keys:
                raise Refused(403, "Invalid API key")
            return "key:" + key, keys[key]
        if self.settings.keys_required:
            raise Refused(400, "Please contact the server operator to get an API key")
        return address, None

    def _admitted(self, request, fields):
        """The client, let in by its key and its request limit, and charged
        one request (whatever its answer, as LibreTranslate charges: a flood
        of bad requests is limited too)."""
        client, key = self._client(request, fields)
        self.limits.admit(client, key and key.req_limit)
        self.limits.spend(client, 1, key and key.req_limit)
        return client, key

    def _char_limit(self, key):
        return key.char_limit if key and key.char_limit is not None else self.settings.char_limit

    async def translate(self, request, fields):
        started = time.monotonic()
        client, key = self._admitted(request, fields)
        texts, is_list = _texts(fields.get("q"))
        source, target = _language(fields, "source"), _language(fields, "target")
        alternatives = _alternatives(fields.get("alternatives", 0))
        limit = self.settings.alternatives_limit
        if limit != NO_LIMIT and alternatives > limit:
            raise Refused(400, "Invalid request: alternatives parameter must be <= "
                               f"{limit}")
        if is_list and self.settings.batch_limit != NO_LIMIT and \
                len(texts) > self.settings.batch_limit:
            raise Refused(400, f"Invalid request: request ({len(texts)}) exceeds text limit "
                               f"({self.settings.batch_limit})")
        char_limit = self._char_limit(key)
        for text in texts:
            if char_limit != NO_LIMIT and len(text) > char_limit:
                raise Refused(400, f"Invalid request: request ({len(text)}) exceeds text limit "
                                   f"({char_limit})")
        if source != "auto":
            self.service.route(source, target)
        elif target not in self.service.routes.languages:
            raise Refused(400, f"{target} is not supported")
        text_format = fields.get("format") or "text"
        if text_format not in documents.FORMATS:
            raise Refused(400, f"{text_format} format is not supported")
        n_best = 1 if text_format == "html" else min(alternatives,
                                                     self.service.most_alternatives) + 1
        glossary = self._glossary(fields.get("glossary"), source, target)
        assess = _quality(fields.get("quality"))
        translations, others, detections, qualities = await self.service.translate_texts(
            texts, source, target, text_format, n_best, glossary, assess=assess)
        if is_list:  # a list of n texts costs n requests
            self.limits.spend(client, len(texts) - 1, key and key.req_limit)
        answer = {"translatedText": translations if is_list else translations[0]}
        if alternatives:
            answer["alternatives"] = others if is_list else others[0]
        if source == "auto":
            answer["detectedLanguage"] = detections if is_list else detections[0]
        if assess:
            found = [quality.as_dict() for quality in qualities]
            answer["confidence"] = [each["confidence"] for each in found] if is_list \
                else found[0]["confidence"]
            answer["flags"] = [each["flags"] for each in found] if is_list else found[0]["flags"]
        self.service.metrics.latency.observe(time.monotonic() - started)
        return JSONResponse(answer)

    def _glossary(self, value, source, target):
        """The glossary a request's `glossary` field names (a served one's
        name) or holds (entries: TSV lines, an object of source -> target,
        or a list of [source, target] pairs); None without one."""
        if value is None or value == "" or value == [] or value == {}:
            return None
        self.service.glossary_route(source, target)
        if isinstance(value, str) and "\t" not in value:
            served = self.settings.glossaries.get(value)
            if served is None:
                raise Refused(400, f"Invalid request: no glossary {value[:100]!r} is served "
                                   "here (or give its entries, a tab between source and target)")
            if (served.source, served.target) != (source, target):
                raise Refused(400, f"Invalid request: the glossary {value!r} is for "
                                   f"{served.source} to {served.target}, not {source} to "
                                   f"{target}")
            return served.glossary
        if isinstance(value, dict):
            value = list(value.items())
        count = value.count("\n") + 1 if isinstance(value, str) else (
            len(value) if isinstance(value, list) else 0)
        if count > self.settings.max_glossary_entries:
            raise Refused(400, f"Invalid request: the glossary's {count} entries are more than "
                               f"this server takes ({self.settings.max_glossary_entries}); "
                               "serve it (--glossary) instead")
        try:
            if isinstance(value, str):
                return Glossary.parse(value, "tsv", source, name="the request's glossary")
            if isinstance(value, list) and all(
                    isinstance(pair, (list, tuple)) and len(pair) == 2
                    and all(isinstance(text, str) for text in pair) for pair in value):
                return Glossary.of(value, source, name="the request's glossary")
        except GlossaryError as error:
            raise Refused(400, f"Invalid request: {error}") from None
        raise Refused(400, "Invalid request: glossary must be a served glossary's name, TSV "
                           "lines, an object of source: target, or [source, target] pairs")

    async def detect(self, request, fields):
        self._admitted(request, fields)
        texts, is_list = _texts(fields.get("q"))
        detector = self.service.detector
        return JSONResponse(detector.detect_many(texts) if is_list else detector.detect(texts[0]))

    async def translate_file(self, request, fields):
        client, key = self._admitted(request, fields)
        if not self.settings.files_translation:
            raise Refused(403, "Files translation are disabled on this server.")
        upload = fields.get("file")
        if not isinstance(upload, bodies.Upload):
            raise Refused(400, "Invalid request: missing file parameter")
        source, target = _language(fields, "source"), _language(fields, "target")
        name = os.path.basename(upload.filename or "")
        if not name:
            raise Refused(400, "Invalid request: empty file")
        if source != "auto":
            self.service.route(source, target)
        char_limit = self._char_limit(key)
        output, _ = await self.service.translate_file(name, upload.data, source, target)
        stored = await self.service.keep_file(name, output)
        if char_limit > 0:  # a file costs its bytes over the char limit, as LibreTranslate's
            self.limits.spend(client, len(upload.data) // char_limit - 1, key and key.req_limit)
        return JSONResponse({"translatedFileUrl": str(request.url_for("download_file",
                                                                      filename=stored))})

    async def download_file(self, request):
        stored = request.path_params["filename"]
        return FileResponse(self.service.stored_file(stored), filename=stored.split(".", 1)[1])

    async def languages(self, request):
        return JSONResponse(self.service.languages())

    async def frontend_settings(self, request):
        """What LibreTranslate's page and libretranslate-aio read: the
        limits, whether keys and suggestions are on, the files taken, and
        the page's default languages (the first model's)."""
        first = self.settings.models[0]
        return JSONResponse({
            "charLimit": self.settings.char_limit, "frontendTimeout": FRONTEND_TIMEOUT,
            "apiKeys": self.settings.api_keys is not None,
            "keyRequired": self.settings.api_keys is not None and self.settings.keys_required,
            "suggestions": self.settings.suggestions is not None,
            "filesTranslation": self.settings.files_translation,
            "supportedFilesFormat": list(FILE_FORMATS) if self.settings.files_translation else [],
            "language": {"source": {"code": "auto", "name": "Auto Detect"},
                         "target": {"code": first.target, "name": language_name(first.target)}},
        })

    async def suggest(self, request):
        fields = await self._fields(request)
        if self.settings.suggestions is None:
            raise Refused(403, "Suggestions are disabled on this server.")
        self._admitted(request, fields)
        q, s = _required(fields, "q"), _required(fields, "s")
        source, target = _language(fields, "source"), _language(fields, "target")
        await asyncio.to_thread(self.settings.suggestions.add, q, s, source, target)
        return JSONResponse({"success": True})

    async def spec(self, request):
        return JSONResponse(openapi.document(self.settings))

    async def health(self, request):
        return JSONResponse({"status": "ok"})

    async def models(self, request):
        return JSONResponse({"models": self.service.models(),
                             "glossaries": self.service.glossaries()})

    async def prometheus(self, request):
        token = self.settings.metrics_token
        if token and request.headers.get("authorization") != f"Bearer {token}":
            raise Refused(401, "Unauthorized")
        return Response(generate_latest(self.service.metrics.registry),
                        media_type=CONTENT_TYPE_LATEST)

    async def page(self, request):
        with open(PAGE, encoding="utf-8") as file:
            return HTMLResponse(file.read())
