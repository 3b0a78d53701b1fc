"""The server's Prometheus metrics (`GET /metrics`): requests by path and
status, latency, and each model's sentences, tokens, queue and batches;
with `--metrics`, LibreTranslate's own too (`LibreTranslateMetrics`)."""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary


class LibreTranslateMetrics:
    """LibreTranslate's metrics, by the names and labels of its app.py with
    `--metrics`, which its dashboards read:

    - `libretranslate_http_request_duration_seconds`, a summary (count and
      sum) of the time to answer, labelled `endpoint`, `status`,
      `request_ip` and `api_key`;
    - `libretranslate_http_requests_in_flight`, a gauge of the requests
      being answered, labelled `endpoint`, `request_ip` and `api_key`.

    As LibreTranslate, only the endpoints its access check guards are
    measured (/translate, /detect, /translate_file: `libretranslate`
    measures them); `request_ip` is X-Forwarded-For's first address,
    else the client's; `api_key` the request's key, "" without one and for
    a key refused (403). Two bounds of ours keep a flood from growing the
    metrics: `api_key` is one of `--api-keys` or "" (without keys, every
    request's is ""), and past `MAX_ADDRESSES` addresses a new one is
    counted as "other"."""

    MAX_ADDRESSES = 1000

    def __init__(self, registry):
        self.duration = Summary("libretranslate_http_request_duration_seconds",
                                "Time spent on request", ["endpoint", "status", "request_ip",
                                                          "api_key"], registry=registry)
        self.in_flight = Gauge("libretranslate_http_requests_in_flight", "Active requests",
                               ["endpoint", "request_ip", "api_key"], registry=registry)
        # The series LibreTranslate makes at its start, so that they show before any request.
        self.duration.labels("/translate", 200, "127.0.0.1", "")
        self.in_flight.labels("/translate", "127.0.0.1", "")
        self._addresses = set()

    def address(self, request):
        """A request's `request_ip` label (a Starlette request)."""
        forwarded = request.headers.getlist("x-forwarded-for")
        address = (forwarded[0].split(",")[0].strip() if forwarded
                   else request.client.host if request.client else "") or "127.0.0.1"
        if address not in self._addresses:
            if len(self._addresses) >= self.MAX_ADDRESSES:
                return "other"
            self._addresses.add(address)
        return address


class Metrics:
    """The metrics of one application (its own registry); `batchers` by
    model name; `libretranslate` adds LibreTranslate's own metrics
    (`LibreTranslateMetrics`, else None)."""

    def __init__(self, batchers, libretranslate=False):
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
        self.libretranslate = LibreTranslateMetrics(self.registry) if libretranslate else None

    def observer(self, name):
        """What a model's batcher reports each batch to."""
        def observe(sentences, tokens, seconds):
            self.sentences.labels(name).inc(sentences)
            self.tokens.labels(name).inc(tokens)
            self.batch_sentences.labels(name).observe(sentences)
            self.batch_seconds.labels(name).observe(seconds)

        return observe


class Counted:
    """An ASGI application, counting every answer by path and status in
    `metrics`: a path under one of `paths` (a file to download, a glossary,
    a document) is counted as that path, any other as "other", so that
    scanners cannot grow the metrics."""

    def __init__(self, app, metrics, paths):
        self.app, self.metrics, self.paths = app, metrics, frozenset(paths)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        if path not in self.paths:
            path = next((known for known in self.paths if known != "/"
                         and path.startswith(known + "/")), "other")

        async def counting_send(message):
            if message["type"] == "http.response.start":
                self.metrics.requests.labels(path, str(message["status"])).inc()
            await send(message)

        await self.app(scope, receive, counting_send)
