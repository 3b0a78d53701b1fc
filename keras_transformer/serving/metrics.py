"""The server's Prometheus metrics (`GET /metrics`): requests by path and
status, latency, and each model's sentences, tokens, queue and batches."""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
    """The metrics of one application (its own registry); `batchers` by
    model name."""

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
