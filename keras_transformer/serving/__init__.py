"""Serving models over HTTP (`keras-transformer serve`, the `serve` extra):
LibreTranslate's API over one model or several (each language pair its
own, English the pivot between them), documents (text of several
sentences, HTML, .docx files) and language detection, a page to try them,
batches shared by concurrent requests, a bounded queue, Prometheus metrics.

- `app.create_app(Settings([ServedModel(runtime, "de", "en"), ...]))`: the
  ASGI application (Starlette), with CORS (`cors`).
- `service.Service`: what every API translates with (routes through the
  pivot, queues, detection, documents, files).
- `libretranslate`: LibreTranslate's API over it; `openapi`, its document
  (`GET /spec`); `bodies`, the fields a request sends; `limits`, keys,
  request limits and stored suggestions; `metrics`, Prometheus'.
- `batcher.Batcher`: batching across requests, one a model.

Each model is any `keras_transformer.runtimes` runtime: a run folder
through the `Translator`, or an export through its SavedModel, CTranslate2,
ONNX or LiteRT runtime.
"""

from keras_transformer.serving.app import ServedGlossary, ServedModel, Settings, create_app
from keras_transformer.serving.batcher import Batcher, QueueFull

__all__ = ["Batcher", "QueueFull", "ServedGlossary", "ServedModel", "Settings", "create_app"]
