"""`GET /spec`: the server's LibreTranslate API as an OpenAPI 3.0 document,
for client generators and API explorers (LibreTranslate serves a Swagger
2.0 one at the same path). tests/serving/test_libretranslate_api.py checks
that it names every route the application serves and nothing else."""

from keras_transformer import __version__, documents
from keras_transformer.serving.service import FILE_FORMATS

_ERROR = {"$ref": "#/components/schemas/Error"}


def _field(name, description, schema=None, required=False):
    return name, {"description": description, "schema": schema or {"type": "string"},
                  "required": required}


def _body(*fields, files=False):
    """A request body of `fields` (from `_field`), as JSON or a form."""
    properties = {name: dict(spec["schema"], description=spec["description"])
                  for name, spec in fields}
    required = [name for name, spec in fields if spec["required"]]
    schema = {"type": "object", "properties": properties, "required": required}
    kinds = ["multipart/form-data"] if files else [
        "application/json", "application/x-www-form-urlencoded", "multipart/form-data"]
    return {"required": True, "content": {kind: {"schema": schema} for kind in kinds}}


def _answers(ok_schema, ok_description, *errors, kind="application/json"):
    answers = {"200": {"description": ok_description,
                       "content": {kind: {"schema": ok_schema}}}}
    reasons = {400: "Invalid request", 403: "A wrong key, or what is turned off",
               404: "Not found", 413: "The body, or the sentences, over the server's limit",
               414: "The query string over the server's limit",
               429: "Over --req-limit requests a minute", 503: "The queue is full"}
    for status in errors:
        answers[str(status)] = {"description": reasons[status],
                                "content": {"application/json": {"schema": _ERROR}}}
    return answers


def document(settings):
    """The OpenAPI document of the API `settings` (`app.Settings`) serves."""
    key = _field("api_key", "API key" + (" (required)" if settings.api_keys is not None
                                         and settings.keys_required else ""))
    q = {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
    confidence = {"type": ["number", "null"], "minimum": 0, "maximum": 1}
    language = {"type": "object", "properties": {"confidence": {"type": "number"},
                                                 "language": {"type": "string"}}}
    limited = (400, 403, 429)
    paths = {
        "/translate": {"post": {
            "summary": "Translate text", "tags": ["translate"],
            "requestBody": _body(
                _field("q", "Text(s) to translate", q, required=True),
                _field("source", 'Source language code, or "auto" to detect each text\'s',
                       required=True),
                _field("target", "Target language code", required=True),
                _field("format", "Format of the text",
                       {"type": "string", "enum": list(documents.FORMATS), "default": "text"}),
                _field("alternatives", "Alternative translations wanted (text only; at most "
                       "the beam size less one are given)", {"type": "integer", "default": 0}),
                _field("glossary", "A served glossary's name, or entries: TSV lines, an "
                       "object of source: target, or [source, target] pairs (ours; needs a "
                       "given source)", {"oneOf": [{"type": "string"}, {"type": "object"},
                                                   {"type": "array"}]}),
                _field("quality", "Add each translation's confidence and flags (ours; "
                       "docs/trust.md)", {"type": "boolean", "default": False}),
                key),
            "responses": _answers({"type": "object", "required": ["translatedText"],
                                   "properties": {
                                       "translatedText": q,
                                       "alternatives": {"type": "array", "items": {}},
                                       "confidence": {"oneOf": [
                                           confidence, {"type": "array", "items": confidence}]},
                                       "flags": {"type": "array", "items": {}},
                                       "detectedLanguage": {"oneOf": [
                                           language, {"type": "array", "items": language}]}}},
                                  "Translation", *limited, 413, 414, 503)}},
        "/detect": {"post": {
            "summary": "Detect the language of text", "tags": ["translate"],
            "requestBody": _body(_field("q", "Text", q, required=True), key),
            "responses": _answers({"type": "array", "items": language},
                                  "Detections, most likely first", *limited, 413, 414)}},
        "/translate_file": {"post": {
            "summary": "Translate a file", "tags": ["translate"],
            "requestBody": _body(
                _field("file", f"The file ({', '.join(FILE_FORMATS)})",
                       {"type": "string", "format": "binary"}, required=True),
                _field("source", 'Source language code, or "auto"', required=True),
                _field("target", "Target language code", required=True), key, files=True),
            "responses": _answers({"type": "object", "properties": {
                "translatedFileUrl": {"type": "string"}}}, "Where the translation waits",
                *limited, 413, 503)}},
        "/download_file/{filename}": {"get": {
            "summary": "Download a translated file", "tags": ["translate"],
            "parameters": [{"name": "filename", "in": "path", "required": True,
                            "schema": {"type": "string"}}],
            "responses": _answers({"type": "string", "format": "binary"}, "The file", 404,
                                  kind="application/octet-stream")}},
        "/languages": {"get": {
            "summary": "The languages served", "tags": ["translate"],
            "responses": _answers({"type": "array", "items": {"type": "object", "properties": {
                "code": {"type": "string"}, "name": {"type": "string"},
                "targets": {"type": "array", "items": {"type": "string"}}}}},
                "Each language and the targets it reaches")}},
        "/frontend/settings": {"get": {
            "summary": "Limits and defaults for a page", "tags": ["misc"],
            "responses": _answers({"type": "object"}, "charLimit, frontendTimeout, apiKeys, "
                                  "keyRequired, suggestions, filesTranslation, "
                                  "supportedFilesFormat, language")}},
        "/suggest": {"post": {
            "summary": "Suggest a better translation", "tags": ["misc"],
            "requestBody": _body(_field("q", "The original text", required=True),
                                 _field("s", "The suggested translation", required=True),
                                 _field("source", "Source language code", required=True),
                                 _field("target", "Target language code", required=True), key),
            "responses": _answers({"type": "object", "properties": {
                "success": {"type": "boolean"}}}, "Stored", *limited)}},
        "/spec": {"get": {"summary": "This document", "tags": ["misc"],
                          "responses": _answers({"type": "object"}, "OpenAPI 3.0")}},
        "/health": {"get": {"summary": "Health check", "tags": ["misc"],
                            "responses": _answers({"type": "object", "properties": {
                                "status": {"type": "string"}}}, '{"status": "ok"}')}},
        "/models": {"get": {"summary": "The models and glossaries served", "tags": ["misc"],
                            "responses": _answers({"type": "object"}, "Each model's runtime, "
                                                  "pair, alternatives and queue; each "
                                                  "glossary's name, pair and entries")}},
        "/metrics": {"get": {"summary": "Prometheus metrics", "tags": ["misc"],
                             "responses": _answers({"type": "string"}, "Prometheus' text "
                                                   "format", kind="text/plain")}},
        "/": {"get": {"summary": "A page to try the models", "tags": ["misc"],
                      "responses": _answers({"type": "string"}, "The page",
                                            kind="text/html")}},
    }
    return {"openapi": "3.0.3",
            "info": {"title": "keras-transformer (LibreTranslate's API)",
                     "version": __version__,
                     "description": "LibreTranslate's API over Transformer models."},
            "paths": paths,
            "components": {"schemas": {"Error": {
                "type": "object", "required": ["error"],
                "properties": {"error": {"type": "string"}}}}}}
