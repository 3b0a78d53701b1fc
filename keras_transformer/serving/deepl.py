"""DeepL's API over the server's models, as DeepL documents it (its OpenAPI
specification) and as its official clients (deepl-python, deepl-node) and
its mock server (DeepLcom/deepl-mock) use it, beside LibreTranslate's API
on the same models, queues, documents and glossaries.

    POST /v2/translate          {"text": ["Guten Morgen!"], "target_lang": "EN-US"}
                                -> {"translations": [{"detected_source_language":
                                    "DE", "text": "Good morning!",
                                    "billed_characters": 13}]}
    GET  /v2/languages          ?type=source|target
    GET  /v2/usage              characters translated per key, and the limit
                                (--char-quota, else DeepL's very large number)
    GET  /v2/glossary-language-pairs   the pairs glossaries are made for
    POST /v2/glossaries         {name, source_lang, target_lang, entries,
                                entries_format}; GET (list), GET/DELETE /{id},
                                GET /{id}/entries (TSV)
    /v3/glossaries              multilingual glossaries: POST {name,
                                dictionaries: [...]}, GET, PATCH, DELETE /{id},
                                PUT/DELETE /{id}/dictionaries, GET /{id}/entries
    GET  /v3/languages          ?resource=translate_text|glossary (Weblate's)
    POST /v2/document           multipart: file (.txt, .html, .docx),
                                target_lang -> {document_id, document_key};
                                POST /{id} the status, POST /{id}/result the file

Fields come from a JSON object, or from the query string and a form
(urlencoded or multipart), where a repeated name is a list (`text`, the tag
lists; a tag list in a form may also be comma-separated). The key comes as
`Authorization: DeepL-Auth-Key KEY` or in the legacy `auth_key` field,
checked against the same keys file as LibreTranslate's (`--api-keys`).

What a client keeps is its own, as on DeepL it is its account's: with
`--api-keys`, a glossary or a document belongs to the key that made it (the
requests without a key, with `--api-keys-optional`, are one owner apart
from every key), and any other key is answered as if it did not exist: a
404, or for a `glossary_id` in a translation the 400 "Glossary not found"
that DeepL answers for an unknown id. The glossaries kept before they had
owners are shared by every key (`glossary_store`). Without `--api-keys`,
the server has one tenant. Usage and `--char-quota` count per tenant
alike (`usage`).

What it keeps is kept on disk, in `--state-dir` (`app.Settings.state_dir`):
glossaries (`glossary_store`), documents (`document_jobs`) and usage
(`usage`), each written whole and changed under its folder's lock, so that
servers given the same folder (replicas) share them and a restart finds
them: a document handed in to one replica is polled and fetched from
another.

What is obeyed: `source_lang` (else each text's language detected and
given back), `target_lang` and its variants (EN-GB, EN-US, PT-BR, PT-PT:
the served base language), `split_sentences` (0, 1, nonewlines; for plain
text), `tag_handling` html or xml with `ignore_tags`, `non_splitting_tags`
and `splitting_tags`, and `glossary_id` (the constrained search). What is
accepted and ignored: `context`, `preserve_formatting` (the text's own
whitespace is always kept), `outline_detection`, `model_type` (answered
with `model_type_used`, as DeepL answers it: one model a pair serves
either way), and `formality` default, prefer_more and prefer_less (more
and less are refused, as DeepL refuses them for a language without
formality). A v3 glossary's dictionaries come as a JSON list, or as a
form's `dictionaries[N].source_lang` (and so on) fields, as deepl-node
sends them.

Errors are `{"message": "..."}`, one line, with DeepL's statuses: 400, 403
(a key missing or not known), 404, 413 (a body over the server's limit),
415 (glossary entries asked for in another type than TSV), 429 (requests
or documents beyond the limits), 456 (a key's --char-quota spent), 503 (a
document not yet translated).
"""

import asyncio
import os
import re
import tempfile
import urllib.parse

from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from keras_transformer.documents.html import Markup
from keras_transformer.serving import bodies
from keras_transformer.serving.document_jobs import DocumentJobs
from keras_transformer.serving.errors import Refused, exception_handlers
from keras_transformer.serving.glossary_store import ANONYMOUS, GlossaryStore, read_dictionary
from keras_transformer.serving.limits import RequestLimits
from keras_transformer.serving.service import FILE_FORMATS, language_name
from keras_transformer.serving.usage import Usage

PREFIXES = ("/v2/", "/v3/")
"""Where the server mounts this API."""

PATHS = ("/v2/translate", "/v2/languages", "/v2/usage", "/v2/glossary-language-pairs",
         "/v2/glossaries", "/v2/document", "/v3/glossaries", "/v3/languages")
"""The paths of this API (for the metrics' labels; a glossary's or a
document's own paths are counted under its collection's)."""

VARIANTS = {"en": (("EN-GB", "English (British)"), ("EN-US", "English (American)")),
            "pt": (("PT-BR", "Portuguese (Brazilian)"), ("PT-PT", "Portuguese (European)")),
            "zh": (("ZH-HANS", "Chinese (simplified)"), ("ZH-HANT", "Chinese (traditional)"))}
"""DeepL's target variants of a base language: what its target list shows
for a served language, each translated by the base language's model."""

LISTS = ("text", "ignore_tags", "non_splitting_tags", "splitting_tags")
"""Fields that are lists (repeated in a form)."""

FORMALITIES = ("default", "prefer_more", "prefer_less")
"""The formality values accepted for a language without formality."""

MODEL_TYPES = {"quality_optimized": "quality_optimized",
               "prefer_quality_optimized": "quality_optimized",
               "latency_optimized": "latency_optimized"}
"""Each `model_type` DeepL takes, and the `model_type_used` answered for it
(one model a pair serves either way)."""

NO_CHARACTER_LIMIT = 10**12
"""The `character_limit` of /v2/usage without --char-quota: DeepL's answer
for an account without a limit, a very large number (its clients read the
limit with the count, and give no usage without it)."""

SPLITS = {"0": False, "1": True, "nonewlines": True}

_DICTIONARY_FIELD = re.compile(r"dictionaries\[(\d{1,6})\](?:\.(\w+)|\[(\w+)\])")
"""A form's field of one dictionary of a v3 glossary, as deepl-node names it
(`dictionaries[0].source_lang`; also `dictionaries[0][source_lang]`)."""

AUTH_PREFIX = "DeepL-Auth-Key "


def merged_fields(sent):
    """A request's fields (`bodies.Sent`): a JSON object alone, else the
    query string's and the form's together, each name's values a list for
    the `LISTS` fields and the first value for the others."""
    if sent.json is not None:
        return sent.json
    fields = {}
    for name, value in [*sent.query, *sent.form]:
        if name in LISTS:
            fields.setdefault(name, []).append(value)
        else:
            fields.setdefault(name, value)
    return fields


def _tags(value, name):
    """A tag list field as a frozenset of lower-case names: a list, or one
    comma-separated string."""
    if value is None or value == "":
        return frozenset()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(tag, str) for tag in value):
        raise Refused(400, f"Value for '{name}' not supported.")
    return frozenset(tag.strip().lower() for item in value for tag in item.split(",")
                     if tag.strip())


def _text(fields, name, default=None):
    value = fields.get(name, default)
    if value is not None and not isinstance(value, str):
        raise Refused(400, f"Value for '{name}' not supported.")
    return value


def _dictionaries(fields):
    """A v3 glossary's `dictionaries`: a JSON body's list, or a form's
    `dictionaries[N].NAME` fields (`_DICTIONARY_FIELD`, as deepl-node sends
    them) gathered into one object a dictionary, in the order of N; None
    where none is sent."""
    if "dictionaries" in fields:
        return fields["dictionaries"]
    found = {}
    for name, value in fields.items():
        match = _DICTIONARY_FIELD.fullmatch(name)
        if match:
            found.setdefault(int(match[1]), {})[match[2] or match[3]] = value
    return [found[index] for index in sorted(found)] or None


def _flag(value, name):
    """A boolean field: a JSON boolean, or 0/1 (also "true"/"false")."""
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("0", "1", "true", "false"):
        return value.lower() in ("1", "true")
    raise Refused(400, f"Value for '{name}' not supported.")


class DeeplApi:
    """The routes of DeepL's API over `service` (a `service.Service`), by
    `settings` (`app.Settings`): its own application (`app`), mounted by
    the server at /v2 and /v3, with DeepL's error bodies."""

    def __init__(self, service, settings):
        self.service, self.settings = service, settings
        state = settings.state_dir or tempfile.mkdtemp(prefix="keras-transformer-state-")
        self.glossaries = GlossaryStore(settings.glossaries_dir
                                        or os.path.join(state, "glossaries"),
                                        settings.max_glossaries,
                                        settings.max_stored_glossary_entries,
                                        settings.max_glossaries_per_key)
        self.characters = Usage(os.path.join(state, "usage"), settings.char_quota)
        """Characters translated per tenant (`/v2/usage`, `--char-quota`)."""
        self.documents = DocumentJobs(
            service, os.path.join(state, "documents"), self.glossaries.compiled,
            lambda owner, count: self.characters.charge(owner, count, whatever_the_quota=True),
            settings.max_documents)
        self.limits = RequestLimits(settings.req_limit)

    def start(self):
        self.documents.start()

    async def stop(self):
        await self.documents.stop()

    def apps(self):
        """`(the /v2 application, the /v3 application)`."""
        handlers = exception_handlers("message")
        v2 = [Route("/translate", self.translate, methods=["POST"]),
              Route("/languages", self.languages, methods=["GET", "POST"]),
              Route("/usage", self.usage, methods=["GET", "POST"]),
              Route("/glossary-language-pairs", self.glossary_pairs),
              Route("/glossaries", self.list_glossaries, methods=["GET"]),
              Route("/glossaries", self.create_glossary, methods=["POST"]),
              Route("/glossaries/{glossary_id}", self.glossary, methods=["GET", "DELETE"]),
              Route("/glossaries/{glossary_id}/entries", self.glossary_entries),
              Route("/document", self.upload_document, methods=["POST"]),
              Route("/document/{document_id}", self.document_status, methods=["GET", "POST"]),
              Route("/document/{document_id}/result", self.document_result,
                    methods=["GET", "POST"])]
        v3 = [Route("/languages", self.languages_v3),
              Route("/glossaries", self.list_glossaries_v3, methods=["GET"]),
              Route("/glossaries", self.create_glossary_v3, methods=["POST"]),
              Route("/glossaries/{glossary_id}", self.glossary_v3,
                    methods=["GET", "PATCH", "DELETE"]),
              Route("/glossaries/{glossary_id}/dictionaries", self.dictionary_v3,
                    methods=["PUT", "DELETE"]),
              Route("/glossaries/{glossary_id}/entries", self.glossary_entries_v3)]
        return (Starlette(routes=v2, exception_handlers=handlers),
                Starlette(routes=v3, exception_handlers=handlers))

    # ------------------------------------------------------------ requests

    async def _fields(self, request, max_body_bytes=None):
        return merged_fields(await bodies.read(
            request, max_body_bytes or self.settings.max_request_bytes))

    def _key(self, request, fields):
        """The request's key ("" without one), let in by `--api-keys` and
        `--req-limit`, and charged one request."""
        header = request.headers.get("authorization")
        if header is not None:
            if not header.startswith(AUTH_PREFIX):
                raise Refused(403, "Authorization failed: send Authorization: DeepL-Auth-Key "
                                   "KEY")
            key = header[len(AUTH_PREFIX):].strip()
        else:
            key = fields.get("auth_key") or request.query_params.get("auth_key") or ""
            if not isinstance(key, str):
                raise Refused(403, "Authorization failed: auth_key must be a string")
        keys, limit = self.settings.api_keys, None
        if keys is not None:
            if key in keys:
                limit = keys[key].req_limit
            elif key or self.settings.keys_required:
                raise Refused(403, "Authorization failed: "
                                   + ("the key is not known here" if key else "give a key"))
        client = "key:" + key if key else (request.client.host if request.client else "unknown")
        self.limits.admit(client, limit)
        self.limits.spend(client, 1, limit)
        return key

    async def _owner(self, key):
        """Whose glossaries and documents a request with `key` (`_key`)
        reaches: None where the server has one tenant (no --api-keys),
        `ANONYMOUS` for a request without a key (--api-keys-optional), else
        the key's digest (`GlossaryStore.owner`: a scrypt the first time,
        off the event loop)."""
        if self.settings.api_keys is None:
            return None
        if not key:
            return ANONYMOUS
        return await asyncio.to_thread(self.glossaries.owner, key)

    async def _tenant(self, request, max_body_bytes=None):
        """`(fields, owner)` of a request let in by `_key`."""
        fields = await self._fields(request, max_body_bytes)
        return fields, await self._owner(self._key(request, fields))

    async def _charge(self, owner, characters):
        """Counts `characters` in `owner`'s usage, or a 456 where that would
        take it over `--char-quota` (`usage.Usage.charge`)."""
        await asyncio.to_thread(self.characters.charge, owner, characters)

    def _source(self, value, required=False):
        """A `source_lang` field as a served source language, or None (to
        detect)."""
        if value is None or value == "":
            if required:
                raise Refused(400, "Parameter 'source_lang' not specified.")
            return None
        if not isinstance(value, str) or value.split("-")[0].lower() not in \
                self.service.routes.sources:
            raise Refused(400, "Value for 'source_lang' not supported.")
        return value.split("-")[0].lower()

    def _target(self, value):
        """A `target_lang` field (a variant such as EN-GB too) as the served
        base language it names."""
        if value is None or value == "":
            raise Refused(400, "Parameter 'target_lang' not specified.")
        if not isinstance(value, str):
            raise Refused(400, "Value for 'target_lang' not supported.")
        base, _, variant = value.upper().partition("-")
        known = {code for code, _ in VARIANTS.get(base.lower(), ())}
        if base.lower() not in self.service.routes.languages or (
                variant and f"{base}-{variant}" not in known):
            raise Refused(400, "Value for 'target_lang' not supported.")
        return base.lower()

    async def _pair_glossary(self, glossary_id, source, target, owner):
        """The compiled glossary `glossary_id` for `source` -> `target`, if
        `owner` (`_owner`) reaches it (else a 400, as DeepL's translate
        answers an unknown id)."""
        if not isinstance(glossary_id, str):
            raise Refused(400, "Value for 'glossary_id' not supported.")
        if source is None:
            raise Refused(400, "Use of a glossary requires the source_lang parameter to be "
                               "specified")
        self.service.glossary_route(source, target)
        try:  # (compiling a large glossary takes a while: off the event loop)
            return await asyncio.to_thread(self.glossaries.compiled, glossary_id, source,
                                           target, owner)
        except Refused as refusal:
            if refusal.status == 404:
                raise Refused(400, "Glossary not found") from None
            raise

    # ------------------------------------------------------------ translating

    async def translate(self, request):
        fields, owner = await self._tenant(request)
        texts = fields.get("text")
        if isinstance(texts, str):
            texts = [texts]
        if not texts:
            raise Refused(400, "Parameter 'text' not specified.")
        if not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
            raise Refused(400, "Value for 'text' not supported: give a list of strings")
        target = self._target(fields.get("target_lang"))
        source = self._source(fields.get("source_lang"))
        model_type_used = self._options(fields)
        tag_handling = _text(fields, "tag_handling", "") or ""
        if tag_handling not in ("", "html", "xml"):
            raise Refused(400, "Value for 'tag_handling' not supported.")
        split = _text(fields, "split_sentences", "nonewlines" if tag_handling else "1")
        if split not in SPLITS:
            raise Refused(400, "Value for 'split_sentences' not supported.")
        if tag_handling:
            reading = {"markup": Markup(
                xml=tag_handling == "xml",
                ignore_tags=_tags(fields.get("ignore_tags"), "ignore_tags"),
                non_splitting_tags=_tags(fields.get("non_splitting_tags"), "non_splitting_tags"),
                splitting_tags=_tags(fields.get("splitting_tags"), "splitting_tags"))}
        else:
            reading = {"split": SPLITS[split], "lines": split == "1"}
        glossary_id = fields.get("glossary_id")
        glossary = (await self._pair_glossary(glossary_id, source, target, owner)
                    if glossary_id not in (None, "") else None)
        if source is not None:
            self.service.route(source, target)
        await self._charge(owner, sum(len(text) for text in texts))
        translations, _, detections, _ = await self.service.translate_texts(
            texts, source or "auto", target, tag_handling or "text", 1, glossary, reading)
        used = {"model_type_used": model_type_used} if model_type_used else {}
        return JSONResponse({"translations": [
            {"detected_source_language": (source or (detection or {}).get("language")
                                          or self.service.routes.sources[0]).upper(),
             "text": translation, "billed_characters": len(text), **used}
            for text, translation, detection in zip(texts, translations, detections)]})

    def _options(self, fields):
        """DeepL's options that change nothing here, refused where DeepL
        refuses them; returns the `model_type_used` to answer (`MODEL_TYPES`;
        None where `model_type` is not sent: DeepL then leaves it out)."""
        formality = _text(fields, "formality", "default")
        if formality in ("more", "less"):
            raise Refused(400, "'formality' is not supported for given 'target_lang'.")
        if formality not in FORMALITIES:
            raise Refused(400, "Value for 'formality' not supported.")
        model_type = _text(fields, "model_type")
        if model_type is not None and model_type not in MODEL_TYPES:
            raise Refused(400, "Value for 'model_type' not supported.")
        for name in ("preserve_formatting", "outline_detection", "show_billed_characters"):
            _flag(fields.get(name), name)
        if not isinstance(fields.get("context", ""), str):
            raise Refused(400, "Value for 'context' not supported.")
        return MODEL_TYPES.get(model_type)

    # ------------------------------------------------------------ languages, usage

    async def languages(self, request):
        fields = await self._fields(request)
        self._key(request, fields)
        kind = _text(fields, "type", "source")
        if kind == "source":
            return JSONResponse([{"language": code.upper(), "name": language_name(code)}
                                 for code in self.service.routes.sources])
        if kind != "target":
            raise Refused(400, "Parameter 'type' is invalid. 'source' and 'target' are valid "
                               "values.")
        targets = sorted({target for source in self.service.routes.sources
                          for target in self.service.routes.targets(source)})
        listed = [{"language": code, "name": name, "supports_formality": False}
                  for target in targets
                  for code, name in VARIANTS.get(target, ((target.upper(),
                                                           language_name(target)),))]
        return JSONResponse(listed)

    async def languages_v3(self, request):
        """DeepL's v3 list of languages (what Weblate's newer backend reads):
        for a `resource` (text, documents or glossaries), each language, its
        target variants, whether each is a source and a target (of a
        glossary: a pair one model translates), and its features, as DeepL
        names them (no formality here)."""
        fields = await self._fields(request)
        self._key(request, fields)
        resource = _text(fields, "resource")
        if resource not in ("translate_text", "translate_document", "glossary"):
            raise Refused(400, "Missing or invalid argument: resource")
        routes = self.service.routes
        pairs = (routes.glossaries if resource == "glossary"
                 else {(source, target) for source in routes.sources
                       for target in routes.targets(source)})
        sources = {source for source, _ in pairs}
        targets = {target for _, target in pairs}
        in_glossaries = {code for pair in routes.glossaries for code in pair}
        stable = {"status": "stable"}
        listed = []
        for code in routes.languages:
            entries = [(code, language_name(code), code in sources)]
            if code in targets and resource != "glossary":  # (DeepL writes a variant en-GB)
                entries += [(variant[:2].lower() + variant[2:], name, False)
                            for variant, name in VARIANTS.get(code, ())]
            for lang, name, source in entries:
                features = {}
                if resource != "glossary":
                    features["tag_handling"] = stable
                    if source:
                        features["auto_detection"] = stable
                    if code in in_glossaries:
                        features["glossary"] = stable
                listed.append({"lang": lang, "name": name, "status": "stable",
                               "usable_as_source": source, "usable_as_target": code in targets,
                               "features": features})
        return JSONResponse(listed)

    async def usage(self, request):
        """What the request's tenant has translated (of every replica on
        the folder, since the folder was made) and its limit."""
        _, owner = await self._tenant(request)
        count = await asyncio.to_thread(self.characters.count, owner)
        return JSONResponse({"character_count": count,
                             "character_limit": self.settings.char_quota or NO_CHARACTER_LIMIT})

    async def glossary_pairs(self, request):
        """The pairs a glossary may be made for: those one model translates
        and obeys glossaries on (`service._Routes.glossaries`), which are
        the pairs `_dictionary` accepts."""
        self._key(request, await self._fields(request))
        return JSONResponse({"supported_languages": [
            {"source_lang": source, "target_lang": target}
            for source, target in sorted(self.service.routes.glossaries)]})

    # ------------------------------------------------------------ glossaries

    def _glossary_language(self, value, name):
        if not isinstance(value, str) or not value:
            raise Refused(400, f"Parameter '{name}' not specified.")
        return value.split("-")[0].lower()

    def _dictionary(self, fields):
        """A `glossary_store.Dictionary` of the fields `source_lang`,
        `target_lang`, `entries` and `entries_format`, for a pair of
        /v2/glossary-language-pairs (one model translates it and obeys
        glossaries)."""
        source = self._glossary_language(fields.get("source_lang"), "source_lang")
        target = self._glossary_language(fields.get("target_lang"), "target_lang")
        if (source, target) not in self.service.routes.glossaries:
            model = self.service.routes.direct.get((source, target))
            raise Refused(400, "Unsupported glossary source and target language pair: " + (
                f"the {source}-{target} model's search obeys no glossary (its "
                f"{model.runtime.name} runtime{', with --slots' if model.runtime.slots else ''}"
                "; the keras runtime's batches do)" if model else
                f"no model here translates {source} to {target}"))
        entries = fields.get("entries")
        if entries is None:
            raise Refused(400, "Parameter 'entries' not specified.")
        return read_dictionary(entries, fields.get("entries_format", "tsv"), source, target)

    def _name(self, fields, required=True):
        name = fields.get("name")
        if name is None and not required:
            return None
        if not isinstance(name, str) or not name.strip():
            raise Refused(400, "Missing or invalid argument: name")
        return name

    @staticmethod
    def _info_v2(glossary):
        """A glossary as v2 shows it: its first dictionary's pair."""
        first = glossary.dictionaries[0] if glossary.dictionaries else None
        return {"glossary_id": glossary.glossary_id, "name": glossary.name, "ready": True,
                "source_lang": first.source if first else "",
                "target_lang": first.target if first else "",
                "creation_time": glossary.creation_time,
                "entry_count": len(first.entries) if first else 0}

    @staticmethod
    def _info_v3(glossary):
        return {"glossary_id": glossary.glossary_id, "name": glossary.name,
                "dictionaries": [_dictionary_info(found) for found in glossary.dictionaries],
                "creation_time": glossary.creation_time}

    async def create_glossary(self, request):
        fields, owner = await self._tenant(request, self.settings.max_glossary_bytes)
        name = self._name(fields)
        glossary = await asyncio.to_thread(self.glossaries.create, name,
                                           [self._dictionary(fields)], owner)
        return JSONResponse(self._info_v2(glossary), status_code=201)

    async def list_glossaries(self, request):
        _, owner = await self._tenant(request)
        found = await asyncio.to_thread(self.glossaries.list, owner)
        return JSONResponse({"glossaries": [self._info_v2(glossary) for glossary in found]})

    async def glossary(self, request):
        _, owner = await self._tenant(request)
        glossary_id = request.path_params["glossary_id"]
        if request.method == "DELETE":
            await asyncio.to_thread(self.glossaries.delete, glossary_id, owner)
            return Response(status_code=204)
        return JSONResponse(self._info_v2(self.glossaries.get(glossary_id, owner)))

    async def glossary_entries(self, request):
        _, owner = await self._tenant(request)
        accepted = request.headers.get("accept", "*/*")
        if not any(kind.split(";")[0].strip() in ("text/tab-separated-values", "*/*", "text/*")
                   for kind in accepted.split(",")):
            raise Refused(415, "No supported media type specified in Accept header")
        glossary = self.glossaries.get(request.path_params["glossary_id"], owner)
        first = glossary.dictionaries[0] if glossary.dictionaries else None
        return Response(_tsv(first.entries if first else []),
                        media_type="text/tab-separated-values; charset=UTF-8")

    async def create_glossary_v3(self, request):
        fields, owner = await self._tenant(request, self.settings.max_glossary_bytes)
        name = self._name(fields)
        dictionaries = _dictionaries(fields)
        if not dictionaries:
            raise Refused(400, "Parameter 'dictionaries' not specified.")
        if not isinstance(dictionaries, list) or not all(isinstance(found, dict)
                                                         for found in dictionaries):
            raise Refused(400, "Value for 'dictionaries' not supported: give a list of "
                               "objects")
        read = [self._dictionary(found) for found in dictionaries]
        if len({(found.source, found.target) for found in read}) < len(read):
            raise Refused(400, "Two dictionaries of the glossary have the same language pair")
        glossary = await asyncio.to_thread(self.glossaries.create, name, read, owner)
        return JSONResponse(self._info_v3(glossary), status_code=201)

    async def list_glossaries_v3(self, request):
        _, owner = await self._tenant(request)
        found = await asyncio.to_thread(self.glossaries.list, owner)
        return JSONResponse({"glossaries": [self._info_v3(glossary) for glossary in found]})

    async def glossary_v3(self, request):
        glossary_id = request.path_params["glossary_id"]
        if request.method == "PATCH":
            fields, owner = await self._tenant(request, self.settings.max_glossary_bytes)
            dictionaries = _dictionaries(fields) or []
            if not isinstance(dictionaries, list) or len(dictionaries) > 1 or not all(
                    isinstance(found, dict) for found in dictionaries):
                raise Refused(400, "Value for 'dictionaries' not supported: give one "
                                   "dictionary")
            glossary = await asyncio.to_thread(
                self.glossaries.update, glossary_id, self._name(fields, required=False),
                [self._dictionary(found) for found in dictionaries], owner=owner)
            return JSONResponse(self._info_v3(glossary))
        _, owner = await self._tenant(request)
        if request.method == "DELETE":
            await asyncio.to_thread(self.glossaries.delete, glossary_id, owner)
            return Response(status_code=204)
        return JSONResponse(self._info_v3(self.glossaries.get(glossary_id, owner)))

    async def dictionary_v3(self, request):
        glossary_id = request.path_params["glossary_id"]
        if request.method == "PUT":
            fields, owner = await self._tenant(request, self.settings.max_glossary_bytes)
            found = self._dictionary(fields)
            await asyncio.to_thread(self.glossaries.update, glossary_id, None, [found],
                                    replace=True, owner=owner)
            return JSONResponse(_dictionary_info(found))
        fields, owner = await self._tenant(request)
        source = self._glossary_language(fields.get("source_lang"), "source_lang")
        target = self._glossary_language(fields.get("target_lang"), "target_lang")
        await asyncio.to_thread(self.glossaries.remove_dictionary, glossary_id, source, target,
                                owner)
        return Response(status_code=204)

    async def glossary_entries_v3(self, request):
        fields, owner = await self._tenant(request)
        glossary = self.glossaries.get(request.path_params["glossary_id"], owner)
        source = self._glossary_language(fields.get("source_lang"), "source_lang")
        target = self._glossary_language(fields.get("target_lang"), "target_lang")
        found = glossary.dictionary(source, target)
        if found is None:
            raise Refused(404, f"The glossary has no dictionary from {source} to {target}")
        return JSONResponse({"dictionaries": [{
            "source_lang": source, "target_lang": target, "entries_format": "tsv",
            "entries": _tsv(found.entries)}]})

    # ------------------------------------------------------------ documents

    async def upload_document(self, request):
        fields, owner = await self._tenant(request, self.settings.max_request_bytes
                                           + self.settings.max_file_bytes)
        upload = fields.get("file")
        if not isinstance(upload, bodies.Upload) or not upload.data:
            raise Refused(400, "Invalid file data.")
        name = os.path.basename(_text(fields, "filename") or upload.filename or "")
        extension = os.path.splitext(name)[1].lower()
        if extension not in FILE_FORMATS:
            raise Refused(400, f"Invalid file data: a document is one of "
                               f"{', '.join(FILE_FORMATS)} here")
        output = _text(fields, "output_format")
        if output and f".{output.lower()}" != extension:
            raise Refused(400, "output_format not supported.")
        target = self._target(fields.get("target_lang"))
        source = self._source(fields.get("source_lang"))
        self._options(fields)
        if source == target:
            raise Refused(400, "Source and target language are equal.")
        if source is not None:
            self.service.route(source, target)
        glossary_id = fields.get("glossary_id")
        if glossary_id not in (None, ""):  # (checked now; the job compiles it again)
            await self._pair_glossary(glossary_id, source, target, owner)
        else:
            glossary_id = None
        await self._charge(owner, 0)  # a key whose quota is spent hands in no more
        document_id, document_key = await self.documents.submit(
            name, upload.data, source or "auto", target, glossary_id, owner)
        return JSONResponse({"document_id": document_id, "document_key": document_key})

    async def _job_fields(self, request):
        """`(document id, document key, owner)` of a request about a job."""
        fields, owner = await self._tenant(request)
        return request.path_params["document_id"], fields.get("document_key"), owner

    async def document_status(self, request):
        job = self.documents.job(*await self._job_fields(request))
        answer = {"document_id": job.document_id, "status": job.status}
        if job.status in ("queued", "translating"):
            answer["seconds_remaining"] = 1
        elif job.status == "done":
            answer.update(seconds_remaining=0, billed_characters=job.billed_characters)
        else:
            answer.update(error_message=job.error_message, message=job.error_message)
        return JSONResponse(answer)

    async def document_result(self, request):
        name, data = await self.documents.result(*await self._job_fields(request))
        kind = {".txt": "text/plain; charset=utf-8", ".html": "text/html; charset=utf-8",
                ".htm": "text/html; charset=utf-8",
                ".docx": "application/vnd.openxmlformats-officedocument."
                         "wordprocessingml.document"}[os.path.splitext(name)[1].lower()]
        return Response(data, media_type=kind, headers={
            "Content-Disposition": f"attachment; filename*=utf-8''{urllib.parse.quote(name)}"})


def _dictionary_info(found):
    return {"source_lang": found.source, "target_lang": found.target,
            "entry_count": len(found.entries)}


def _tsv(entries):
    return "\n".join(f"{source}\t{target}" for source, target in entries)
