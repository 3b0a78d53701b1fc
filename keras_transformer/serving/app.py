"""The HTTP application of `keras-transformer serve` (Starlette, an ASGI
application; the command runs it on uvicorn): LibreTranslate's API
(`libretranslate`) and DeepL's (`deepl`, under /v2 and /v3) over one model
or several (`service`), with CORS headers on every answer (`cors`) and
every answer counted in the metrics.

A text is read as a document (`documents`): split into sentences, or, as
HTML, into the text of its blocks with its markup kept; its sentences are
translated in the batches of the model that translates its language pair
(`Batcher`, one queue a model), or through English where no model does but
two do via English (the pivot Argos Translate uses), and written back.

Errors are JSON, one line each, in the body of the API asked
(`{"error": "..."}` for LibreTranslate's, `{"message": "..."}` for
DeepL's); 404 and 405 for other paths and methods; 500 only for a fault of the
server's own, logged with its traceback.

Stopping is uvicorn's: it stops accepting connections, closes the idle
ones and lets the requests in flight finish; only then does the
application's lifespan end, stopping the batchers' workers.
"""

import contextlib
import dataclasses
import os

from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Mount

from keras_transformer.serving import deepl, libretranslate
from keras_transformer.serving.cors import Cors
from keras_transformer.serving.errors import exception_handlers
from keras_transformer.serving.limits import NO_LIMIT, Key
from keras_transformer.serving.metrics import Counted
from keras_transformer.serving.service import Service


@dataclasses.dataclass
class ServedModel:
    """One model of the server: a `runtimes.Runtime` and the language pair it
    translates; `name` (default: its folder's name) labels it in /models and
    /metrics."""

    runtime: object
    source: str
    target: str
    name: str = None

    def __post_init__(self):
        self.name = self.name or os.path.basename(os.path.normpath(self.runtime.path))


@dataclasses.dataclass
class ServedGlossary:
    """A glossary the server keeps (`serve --glossary NAME=FILE`), for
    requests that name it: a `glossary.Glossary` and its language pair."""

    glossary: object
    source: str
    target: str


class Settings:
    """What the application serves and its limits.

    The server's own:
        models: the `ServedModel`s (one per language pair).
        max_request_bytes: the largest body accepted (413 beyond).
        max_query_bytes: the longest query string accepted (414 beyond).
        max_file_bytes: the largest file /translate_file takes.
        max_queue: sentences that may wait at once, per model (503 beyond).
        batch_tokens: see `Batcher` (default: each runtime's own default).
        max_wait: see `Batcher`.
        workers: see `Batcher` (per model).
        retry_after: seconds a refused client is told to wait.
        files_dir: where translated files wait to be downloaded (default: a
            temporary folder); the oldest go beyond `kept_files`.
        kept_files: translated files kept for download.
        cors_origins: the origins whose pages may call the server ("*":
            any, LibreTranslate's).

    LibreTranslate's, by its flags (-1: no limit):
        api_keys: `{key: limits.Key}` (`limits.read_keys`), or None.
        keys_required: whether every request to /translate, /detect and
            /translate_file must carry one of `api_keys` (else a request
            without one is let in at the server's limits).
        char_limit: characters a text may hold.
        req_limit: requests a minute per key, or per address without one.
        batch_limit: texts a list may hold.
        alternatives_limit: alternatives a request may ask for.
        suggestions: a `limits.Suggestions` store for /suggest, or None
            (suggestions off: 403).
        files_translation: whether /translate_file translates (else 403).
        metrics_token: a token /metrics then needs (`Authorization: Bearer
            TOKEN`), or None.
        libretranslate_metrics: whether /metrics also gives LibreTranslate's
            own metrics (`metrics.LibreTranslateMetrics`; its --metrics).

    Glossaries:
        glossaries: `{name: ServedGlossary}` requests may name.
        max_glossary_entries: entries a request's own glossary may hold.

    DeepL's API:
        state_dir: where its glossaries, documents and usage are kept, in
            the subfolders glossaries, documents and usage, shared by the
            servers given the same folder (default: a temporary folder of
            this process).
        glossaries_dir: where its glossaries are kept instead (default:
            `state_dir`'s glossaries).
        max_glossaries: glossaries kept at most, of every key together.
        max_glossaries_per_key: glossaries one key (or, with
            `keys_required` false, the requests without a key together)
            may keep (default: `max_glossaries` shared evenly among them,
            so that no key can take every slot).
        max_stored_glossary_entries: entries one glossary may hold.
        max_glossary_bytes: the largest body creating a glossary (413
            beyond).
        char_quota: characters a key (a tenant: `usage`) may translate (456
            beyond), or None.
        max_documents: documents handed in and not yet fetched, of every
            server on `state_dir` (429 beyond).
    """

    def __init__(self, models, api_keys=None, keys_required=True, max_request_bytes=262144,
                 max_query_bytes=65536, max_file_bytes=8 * 2**20, max_queue=1024,
                 batch_tokens=None, max_wait=0.03, workers=2, retry_after=1, files_dir=None,
                 kept_files=100, cors_origins=("*",), char_limit=NO_LIMIT, req_limit=NO_LIMIT,
                 batch_limit=NO_LIMIT, alternatives_limit=NO_LIMIT, suggestions=None,
                 files_translation=True, metrics_token=None, libretranslate_metrics=False,
                 glossaries=None,
                 max_glossary_entries=10000, glossaries_dir=None, max_glossaries=1000,
                 max_glossaries_per_key=None, max_stored_glossary_entries=100000,
                 max_glossary_bytes=8 * 2**20, char_quota=None, max_documents=32,
                 state_dir=None):
        self.models = list(models)
        pairs = [(model.source, model.target) for model in self.models]
        if not self.models or len(set(pairs)) < len(pairs):
            raise ValueError(f"Serve one model per language pair; got the pairs {pairs}.")
        names = [model.name for model in self.models]
        for model in self.models:  # folders of one name ("model" twice): named by pair too
            if names.count(model.name) > 1:
                model.name = f"{model.name}-{model.source}-{model.target}"
        if isinstance(api_keys, (set, frozenset, list, tuple)):  # keys without limits of their own
            api_keys = {key: Key() for key in api_keys}
        self.api_keys, self.keys_required = api_keys, keys_required
        self.max_request_bytes = max_request_bytes
        self.max_query_bytes = max_query_bytes
        self.max_file_bytes = max_file_bytes
        self.max_queue = max_queue
        self.batch_tokens = batch_tokens
        self.max_wait = max_wait
        self.workers = workers
        self.retry_after = retry_after
        self.files_dir = files_dir
        self.kept_files = kept_files
        self.cors_origins = tuple(cors_origins)
        self.char_limit, self.req_limit = char_limit, req_limit
        self.batch_limit, self.alternatives_limit = batch_limit, alternatives_limit
        self.suggestions = suggestions
        self.files_translation = files_translation
        self.metrics_token = metrics_token
        self.libretranslate_metrics = libretranslate_metrics
        self.glossaries = dict(glossaries or {})
        self.max_glossary_entries = max_glossary_entries
        self.glossaries_dir, self.max_glossaries = glossaries_dir, max_glossaries
        owners = 1 if api_keys is None else len(api_keys) + (not keys_required)
        self.max_glossaries_per_key = max_glossaries_per_key or max(max_glossaries // owners, 1)
        self.max_stored_glossary_entries = max_stored_glossary_entries
        self.max_glossary_bytes = max_glossary_bytes
        self.char_quota, self.max_documents = char_quota, max_documents
        self.state_dir = state_dir


def create_app(settings):
    """The ASGI application serving `settings.models`."""
    service = Service(settings)
    api = libretranslate.LibreTranslateApi(service, settings)
    deepl_api = deepl.DeeplApi(service, settings)
    v2, v3 = deepl_api.apps()

    @contextlib.asynccontextmanager
    async def lifespan(app):
        service.start()
        deepl_api.start()
        try:
            yield
        finally:
            await deepl_api.stop()
            await service.stop()

    app = Starlette(routes=[*api.routes(), Mount("/v2", v2), Mount("/v3", v3)],
                    lifespan=lifespan, exception_handlers=exception_handlers("error"))
    app = Counted(_QueryLimit(app, settings.max_query_bytes), service.metrics,
                  libretranslate.PATHS + deepl.PATHS)
    return Cors(app, settings.cors_origins)


class _QueryLimit:
    """An ASGI application that answers a query string over `max_bytes`
    with a 414 and one line, whatever the path (in the error body of the
    API the path is DeepL's or LibreTranslate's)."""

    def __init__(self, app, max_bytes):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        length = len(scope.get("query_string", b""))
        if scope["type"] == "http" and length > self.max_bytes:
            field = "message" if scope["path"].startswith(deepl.PREFIXES) else "error"
            response = JSONResponse({field: f"The query string ({length} bytes) is over this "
                                            f"server's limit of {self.max_bytes} bytes; send "
                                            "the fields in the body"}, status_code=414)
            return await response(scope, receive, send)
        await self.app(scope, receive, send)
