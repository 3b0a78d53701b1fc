"""Serving a model over HTTP (`keras-transformer serve`, the `serve` extra):
LibreTranslate's API, a page to try the model, batches shared by concurrent
requests, a bounded queue, Prometheus metrics.

- `app.create_app(Settings(runtime, ...))`: the ASGI application (Starlette).
- `batcher.Batcher`: batching across requests.

The model is any `keras_transformer.runtimes` runtime: a run folder through
the `Translator`, or an export through its SavedModel, CTranslate2 or ONNX
runtime.
"""

from keras_transformer.serving.app import Settings, create_app
from keras_transformer.serving.batcher import Batcher, QueueFull

__all__ = ["Batcher", "QueueFull", "Settings", "create_app"]
